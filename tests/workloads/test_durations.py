import pytest

from portal.workloads.templatetags.durations import duration


@pytest.mark.parametrize(
    ("seconds", "want"),
    [(None, ""), (0, "0 s"), (45, "45 s"), (90, "1 min 30 s"), (3600, "1 h"), (10_800, "3 h"),
     (5400, "1 h 30 min"), (90_061, "1 d 1 h"), (-5, "0 s")],
)  # fmt: skip
def test_a_length_of_time_reads_as_people_say_it(seconds, want):
    assert duration(seconds) == want
