"""Where the doctor's hosts reach each other: their tasks' TF_CONFIG address and ports."""

from __future__ import annotations

import pytest

from launcher.doctor.targets import has_links, split_address, targets
from tests.unit.doctor.reports import launch_plan as plan


@pytest.mark.parametrize(("text", "host"), [("198.18.0.11:2222", "198.18.0.11"),
                                            ("[fd00::1]:2222", "fd00::1"),
                                            ("node-a:1", "node-a"), ("node-a", "node-a")])
def test_split_address(text: str, host: str) -> None:
    assert split_address(text) == host


def test_peers_use_the_tasks_tf_config_address_and_ports() -> None:
    found = targets(plan(("h1", False, "ssh-h1", 2222), ("h2", False, "ssh-h2", 0)))
    assert [(t.name, t.address, t.ports) for t in found] == [("h1", "10.0.0.1", (2222,)),
                                                            ("h2", "10.0.0.2", ())]
    assert has_links(found)


def test_a_spec_all_on_this_machine_has_no_links() -> None:
    assert not has_links(targets(plan(("localhost", True, "localhost", 0))))
    assert not has_links(targets(plan(("a", True, "localhost", 0), ("b", True, "localhost", 0))))
    assert has_links(targets(plan(("localhost", True, "localhost", 0), ("h2", False, "h2", 22))))
