"""One hand-built rollout step shared by the metric tests (imported by basename: tests/ is on sys.path).

Six completed groups of 4 trajectories each (values worked out by hand in the tests):

  gi  arm             mask      trajectory rewards (segments)          filter / fate
  1   skill_free      -         1.0 (3 seg), 0.0, 0.5, 0.0              keep     -> accepted
  2   assisted        c1, c2    0.2, 0.2, 0.2, 0.2  (all fail)          zero_std -> really dropped
  3   assisted_empty  -         1.0, 1.0, 1.0, 1.0  (2 seg each)        zero_std -> kept when insufficient, accepted
  4   assisted        c1        ERROR, 0.0, 0.4, 0.0                    technical -> dropped
  5   assisted        c1        0.0, 1.0, 0.0, 0.0                      keep     -> accepted
  6   skill_free      -         0.5, 0.0, 0.5, 1.0                      keep     -> surplus (batch was full)

rho = {c1: 0.5, c2: 0.25}; q = 0.5; success <=> reward == 1.0.
"""

from __future__ import annotations

from shopsimrl.contract import Arm
from shopsimrl.metrics.synthetic import Traj, make_group

RHO = {"c1": 0.5, "c2": 0.25}
ACCEPTED = (1, 3, 5)
DROP_METRICS = {
    "rollout/dynamic_filter/drop_zero_std_0.2": 1,
    "rollout/dynamic_filter/drop_technical_error": 1,
}


def scenario_groups(fan_out: bool = False) -> list[list]:
    return [
        make_group(1, [Traj(1.0, segments=3), Traj(0.0), Traj(0.5), Traj(0.0)], arm=Arm.SKILL_FREE, rho=RHO, fan_out=fan_out),
        make_group(2, [Traj(0.2)] * 4, arm=Arm.ASSISTED, mask=("c1", "c2"), rho=RHO, fan_out=fan_out),
        make_group(3, [Traj(1.0, segments=2)] * 4, arm=Arm.ASSISTED_EMPTY, rho=RHO, fan_out=fan_out),
        make_group(4, [Traj(None, error="environment"), Traj(0.0), Traj(0.4), Traj(0.0)], arm=Arm.ASSISTED,
                   mask=("c1",), rho=RHO, fan_out=fan_out),
        make_group(5, [Traj(0.0), Traj(1.0), Traj(0.0), Traj(0.0)], arm=Arm.ASSISTED, mask=("c1",), rho=RHO,
                   fan_out=fan_out),
        make_group(6, [Traj(0.5), Traj(0.0), Traj(0.5), Traj(1.0)], arm=Arm.SKILL_FREE, rho=RHO, fan_out=fan_out),
    ]
