"""With a namespace per team, GPU and CPU readings come from every namespace Gridlane's running pods are in, in one
query: the matcher names each (and only) those namespaces, and readings of pods elsewhere are left out."""

from __future__ import annotations

from fabrics.kubernetes import cadvisor, dcgm


def series(name: str, namespace: str, pod: str, value: str, **labels: str) -> dict:
    return {"metric": {"__name__": name, "namespace": namespace, "pod": pod, **labels}, "value": [0, value]}


def test_one_namespace_is_matched_as_a_string_and_several_as_an_anchored_alternation():
    assert 'namespace="gl-vision"' in dcgm.query_for("gl-vision")
    query = dcgm.query_for({"gl-vision", "gl-fraud"})
    assert 'namespace=~"gl-fraud|gl-vision"' in query
    assert 'exported_namespace=~"gl-fraud|gl-vision"' in query
    assert 'namespace=~"gl-fraud|gl-vision"' in cadvisor.query_for(["gl-vision", "gl-fraud"])


def test_a_name_that_is_no_namespace_never_reaches_the_query():
    query = dcgm.query_for({'x"} or up{a="', "gl-vision"})
    assert query.count('"') == dcgm.query_for("gl-vision").count('"')
    assert 'namespace="-"' in dcgm.query_for({"Not A Label"})  # nothing left: a matcher that matches nothing


def test_readings_of_every_asked_namespace_count_and_others_do_not():
    result = [
        series(dcgm.METRIC, "gl-vision", "gl-1-abc", "40"),
        series(dcgm.METRIC, "gl-fraud", "gl-2-def", "90"),
        series(dcgm.METRIC, "someone-else", "their-pod", "10"),
        series(cadvisor.METRIC, "gl-fraud", "gl-2-def", "1.5", container="main", **{dcgm.OTHER: cadvisor.MARK}),
    ]
    asked = {"gl-vision", "gl-fraud"}
    assert dcgm.by_pod(result, asked) == {"gl-1-abc": 40.0, "gl-2-def": 90.0}
    assert cadvisor.by_pod(result, asked) == {"gl-2-def": 1.5}
    assert dcgm.by_pod(result, "gl-vision") == {"gl-1-abc": 40.0}
