"""The physics latency law (models/engine/physics.py): its fit to the H200 rows with the shared
coefficients, the exact decode line the engine's closed forms rely on, and the terms behaving as their
physics says (more work takes longer, tensor parallelism splits work and adds all-reduces, a mixture of
experts reads the experts its tokens touch)."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from wadiloco.models.engine import catalog
from wadiloco.models.engine.physics import PhysicsLaw
from wadiloco.models.engine.physics_fit import Coefficients, bench_rows, default_coefficients, fitted

C = default_coefficients()


def law(name="Llama-2-7b-hf", gpu="H100 SXM", tp=1, c=C) -> PhysicsLaw:
    return PhysicsLaw(catalog.model(name), catalog.gpu(gpu), tp, c)


def test_the_h200_rows_with_the_shared_coefficients():
    rows, r2 = bench_rows(C)
    assert len(rows) == 19
    assert r2 >= 0.98  # the acceptance bar
    errs = sorted(abs(t / y - 1) for _, y, t in rows)
    assert errs[len(errs) // 2] < 0.05 and errs[-1] < 0.2


def test_the_packaged_fit_names_every_coefficient_with_its_rows():
    c = fitted()["coefficients"]
    assert set(c) == set(Coefficients.names())
    for name, entry in c.items():
        assert entry["value"] > 0 and entry["se"] > 0 and entry["rows"], name
    assert 0 < C.eta_dattn < C.eta_moe < C.eta_f < C.eta_b <= 1


@pytest.mark.parametrize("name, tp", [("Llama-2-7b-hf", 1), ("Llama-2-70b-hf", 4), ("Mixtral-8x7B-v0.1", 2)])
def test_a_decode_run_is_the_line_g0_plus_i_dg(name, tp):
    lw = law(name, tp=tp)
    n, s0 = 96, 96 * 700
    g0, dg = lw.decode_line(n, s0)
    assert g0 == lw.step_time(0, 0, 0, 0, n, s0)  # bit for bit
    for i in (1, 17, 500):
        assert lw.step_time(0, 0, 0, 0, n, s0 + i * n) == pytest.approx(g0 + i * dg, rel=1e-12)


def test_more_work_takes_longer():
    lw = law()
    base = lw.step_time(512, 1, 512 * 513 // 2, 0, 32, 32 * 1000)
    assert lw.step_time(1024, 1, 1024 * 1025 // 2, 0, 32, 32 * 1000) > base  # more prefill
    assert lw.step_time(512, 1, 512 * 513 // 2 + 512 * 3000, 3000, 32, 32 * 1000) > base  # a chunk after its past
    assert lw.step_time(512, 1, 512 * 513 // 2, 0, 64, 64 * 1000) > base  # more decodes
    assert lw.step_time(512, 1, 512 * 513 // 2, 0, 32, 32 * 3000) > base  # longer contexts


def test_the_dense_roofline_lies_between_max_and_sum():
    lw = law()
    for tokens in (1, 64, 256, 2048):
        t = lw.dense(tokens, tokens)
        sum_ = law(c=replace(C, p=1.0)).dense(tokens, tokens)
        max_ = law(c=replace(C, p=200.0)).dense(tokens, tokens)
        assert max_ <= t <= sum_


def test_tensor_parallelism_splits_the_work_and_adds_all_reduces():
    one, four = law("Llama-2-70b-hf", tp=1), law("Llama-2-70b-hf", tp=4)
    assert one.breakdown(0, 0, 0, 0, 8, 8000)["allreduce"] == 0.0
    b4 = four.breakdown(0, 0, 0, 0, 8, 8000)
    assert b4["allreduce"] > 0 and b4["dense"] == pytest.approx(one.breakdown(0, 0, 0, 0, 8, 8000)["dense"] / 4)
    slow_link = PhysicsLaw(four.shape, replace(four.gpu, link_bw=four.gpu.link_bw / 10), 4, C)
    assert slow_link.step_time(2048, 1, 2048 * 2049 // 2, 0, 0, 0) > four.step_time(2048, 1, 2048 * 2049 // 2, 0, 0, 0)
    with pytest.raises(ValueError, match="tensor parallelism 3"):
        law("Llama-2-70b-hf", tp=3)


def test_a_mixture_of_experts_reads_the_experts_its_tokens_touch():
    mix = law("Mixtral-8x7B-v0.1", tp=2)
    no_flops = replace(C, eta_f=1e9)  # the weight reads alone
    lw = law("Mixtral-8x7B-v0.1", tp=2, c=no_flops)
    s = mix.shape
    w_dense = (s.layers * s.dense_params_layer + s.head_params) * 2 / 2 / (C.eta_b * mix.gpu.hbm_bw)
    w_expert = s.layers * s.expert_params * 2 / 2 / (C.eta_moe * mix.gpu.hbm_bw)
    assert lw.dense(1, 1) == pytest.approx(w_dense + 2 * w_expert, rel=1e-6)  # one token: its top-2
    assert lw.dense(4096, 0) == pytest.approx(w_dense + 8 * w_expert, rel=1e-3)  # many: all 8
    assert lw.dense(1, 1) < lw.dense(8, 8) < lw.dense(64, 64)


def test_a_saturated_step_is_a_mean_composition():
    lw = law()
    g = lw.saturated(128, 600, 250, 300)
    assert lw.step_time(0, 0, 0, 0, 128, 128 * 600) < g < lw.step_time(2048, 1, 2048 * 2049 // 2, 0, 128, 128 * 725)


def test_laws_are_values():
    a, b = law("Llama-2-70b-hf", tp=4), law("Llama-2-70b-hf", tp=4)
    assert a == b and hash(a) == hash(b) and a != law("Llama-2-70b-hf", tp=2)
    c = pickle.loads(pickle.dumps(a))
    assert c == a and c.step_time(100, 1, 5050, 0, 10, 9000) == a.step_time(100, 1, 5050, 0, 10, 9000)


def test_a_fleet_names_its_model_gpu_and_tensor_parallelism():
    from wadiloco.models.spec.resolve import from_dict
    from wadiloco.models.spec.scenario import Scenario

    run = from_dict(
        {"engine": {"latency": "physics", "model": "Llama-2-70b-hf", "gpu": "H100 SXM", "tensor_parallel": 4}}
    )
    e = run.engine
    assert e.latency == law("Llama-2-70b-hf", tp=4)
    assert e.kv_bytes_per_token == 80 * 2 * 2 * 128 * 2 and e.block_bytes == 16 * e.kv_bytes_per_token
    assert e.kv.blocks > 30000 and e.kv.watermark == 0.0  # vLLM V1 keeps no watermark
    assert from_dict({"engine": {"kv_blocks": 100}}).engine.kv.watermark == 0.01  # other laws: as before
    assert Scenario().digest() == Scenario(engine={"tensor_parallel": 1}).digest()  # opt-in fields
