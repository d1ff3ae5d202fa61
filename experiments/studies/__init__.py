"""Studies made with the simulator: the paper, the atlas, the testbed twin."""
