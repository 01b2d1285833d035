"""A batch's paths (portal.workloads.paths) answer as reverse() does, for every workload path a job is told."""

from __future__ import annotations

import uuid

import pytest
from django.urls import NoReverseMatch, clear_script_prefix, reverse, set_script_prefix

from portal.workloads.paths import Paths, path_of

NAMES = ("api:workload-endpoint", "api:workload-samples", "api:workload-code", "connect:root")


@pytest.mark.parametrize("prefix", ["/", "/gridlane/"])
def test_each_path_is_reverses_own_under_any_script_prefix(prefix):
    set_script_prefix(prefix)
    try:
        paths = Paths()
        ids = [uuid.uuid4() for _ in range(5)] + [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
        for name in NAMES:
            for pk in ids:
                assert paths.of(name, pk) == reverse(name, args=[pk])
                assert paths.of(name, str(pk)) == reverse(name, args=[pk])  # an id given as text
                assert path_of(name, pk) == path_of(name, pk, paths)
        assert reverse("connect:root", args=[ids[0]]).startswith(prefix)
    finally:
        clear_script_prefix()


def test_what_is_not_an_id_is_refused_not_put_in_a_path():
    with pytest.raises(ValueError, match="hexadecimal UUID"):
        Paths().of("connect:root", "../../admin")


def test_a_name_that_takes_no_id_is_refused_as_reverse_refuses_it():
    with pytest.raises(NoReverseMatch):
        Paths().of("api:workload-list", uuid.uuid4())
