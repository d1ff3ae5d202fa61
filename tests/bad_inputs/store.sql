BEGIN TRANSACTION;
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema_version','1');
INSERT INTO "meta" VALUES('plan','{"arms":[{"draws":1,"label":"no_sync","name":"no_sync","params":{},"params_hash":"f4fe36fd71edbc82","reference":null,"regimes":null,"role":"baseline"},{"draws":1,"label":"fixed","name":"fixed","params":{"H":20},"params_hash":"9f627640455d48ac","reference":null,"regimes":null,"role":"policy"}],"bootstrap":{"confidence":0.95,"method":"BCa","n_resamples":9999,"seed":0},"description":"","file":"w.yaml","gate":{"alpha":0.05,"envelope":[2.5,97.5],"min_p95_ratio":1.05,"transfer":"matched","transfer_alternatives":[1.0,1.02,1.1]},"identity":"03f1f5dd6acc0c76fec420f19f4861ae","inputs":{"wadiloco.models.data/h200_llama8b_interference.json":"50e6173cedc2a025fb0690e3fc907b43126067e019fc55c5aef7aed30fdc41c7"},"name":"tiny","regimes":[{"horizon_s":4.0,"name":"tiny","path":"s.yaml","scenario_hash":"0837af71babd0fd3","workload":"normal"}],"seeds":[0],"timeline_seed":0}');
INSERT INTO "meta" VALUES('identity','03f1f5dd6acc0c76fec420f19f4861ae');
INSERT INTO "meta" VALUES('provenance','{}');
CREATE TABLE runs (
    scenario_hash TEXT NOT NULL,
    policy_label  TEXT NOT NULL,
    params_hash   TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    draw          INTEGER NOT NULL,
    regime        TEXT NOT NULL,
    policy        TEXT NOT NULL,
    params_json   TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    error         TEXT,
    summary_json  TEXT,
    timeline_json TEXT,
    reference_json TEXT,
    detail        BLOB,
    wall_s        REAL,
    attempts      INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (scenario_hash, policy_label, params_hash, seed, draw)
) WITHOUT ROWID;
INSERT INTO "runs" VALUES('0837af71babd0fd3','fixed','9f627640455d48ac',0,0,'tiny','fixed','{"H":20}','ok',NULL,'{"arrivals_hash":"63ad11afa3c59344c1fd1e0b5518a7845eef56f634013e0ad4d775450b2a1350","capacity_rps_per_sidecar":28.229202227293626,"completed":15,"contended_iterations":410,"draw":0,"e2e_p50_s":0.631815159901751,"e2e_p95_no_overlap_s":1.757878034630856,"e2e_p95_overlap_baseline_s":null,"e2e_p95_overlap_matched_s":null,"e2e_p95_overlap_s":null,"e2e_p95_s":1.757878034630856,"e2e_p99_s":1.8721608358872277,"engine_iterations":544,"final_loss":3.2806364996981445,"inner_steps":20,"load_hash":"63ad11afa3c59344c1fd1e0b5518a7845eef56f634013e0ad4d775450b2a1350","merge_duration_mean_s":0.0,"merge_phase_mean_s":{"allreduce":0.0,"ckpt":0.0,"outer":0.0,"stage":0.0},"merge_steps":[],"merges":0,"overlap_requests":0,"overlap_window":"merges","peak_link_load":1.0,"policy":"fixed","reference_merges":null,"requests":21,"scenario":"tiny","seed":0,"sim_time_s":5.0,"slo":{"tpot_s":0.1,"ttft_s":1.0},"slo_violation_rate":0.2857142857142857,"slo_violations":6,"tpot_p50_s":0.007511085844189448,"tpot_p95_s":0.008156265398846096,"ttft_p50_s":0.02660379804435986,"ttft_p95_s":0.057755093570439175,"ttft_p99_s":0.05776136015717528,"unfinished":6,"violations_by_phase":{"allreduce":0,"ckpt":0,"none":6,"outer":0,"stage":0}}',NULL,NULL,NULL,3.08348200087493751198e-03,1);
INSERT INTO "runs" VALUES('0837af71babd0fd3','no_sync','f4fe36fd71edbc82',0,0,'tiny','no_sync','{}','ok',NULL,'{"arrivals_hash":"63ad11afa3c59344c1fd1e0b5518a7845eef56f634013e0ad4d775450b2a1350","capacity_rps_per_sidecar":28.229202227293626,"completed":19,"contended_iterations":0,"draw":0,"e2e_p50_s":0.662457267452571,"e2e_p95_no_overlap_s":2.674499665574751,"e2e_p95_overlap_baseline_s":null,"e2e_p95_overlap_matched_s":null,"e2e_p95_overlap_s":null,"e2e_p95_s":2.674499665574751,"e2e_p99_s":2.806798037036589,"engine_iterations":839,"final_loss":3.270239454719983,"inner_steps":79,"load_hash":"63ad11afa3c59344c1fd1e0b5518a7845eef56f634013e0ad4d775450b2a1350","merge_duration_mean_s":0.0,"merge_phase_mean_s":{"allreduce":0.0,"ckpt":0.0,"outer":0.0,"stage":0.0},"merge_steps":[],"merges":0,"overlap_requests":0,"overlap_window":"merges","peak_link_load":0.0,"policy":"no_sync","reference_merges":null,"requests":21,"scenario":"tiny","seed":0,"sim_time_s":5.0,"slo":{"tpot_s":0.1,"ttft_s":1.0},"slo_violation_rate":0.09523809523809523,"slo_violations":2,"tpot_p50_s":0.005322814933909368,"tpot_p95_s":0.005968596103659688,"ttft_p50_s":0.02575245780581209,"ttft_p95_s":0.061283377675755535,"ttft_p99_s":0.06128964426249164,"unfinished":2,"violations_by_phase":{"allreduce":0,"ckpt":0,"none":2,"outer":0,"stage":0}}',NULL,NULL,NULL,2.01551987399943755008e+00,1);
COMMIT;
