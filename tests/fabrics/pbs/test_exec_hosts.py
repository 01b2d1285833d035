"""Every execution host of a PBS job is kept, in PBS's order, as a node list the rest of Gridlane expands
(fabrics.hostlist): PBS Pro's and Torque's `exec_host`, domains included; a list too long for the workload's
200 characters is compressed to Slurm's ranges, and never cut without saying so."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabrics import hostlist
from fabrics.pbs.parse import HOST_CHARS, PbsJob, qstat_full


def job(exec_host: str) -> PbsJob:
    return PbsJob("7.pbs", {"job_state": "R", "exec_host": exec_host})


@pytest.mark.parametrize(
    ("exec_host", "hosts"),
    [
        ("node1/0*8+node2/0*8", ["node1", "node2"]),  # PBS Pro: host/first CPU*CPUs
        ("gpu017/0*8", ["gpu017"]),
        ("n1/0+n1/1+n2/0", ["n1", "n2"]),  # Torque: a chunk per CPU, hosts repeated
        ("node07/0-1+node08/0-1", ["node07", "node08"]),  # Torque's CPU ranges
        ("b.cluster.org/0*4+a.cluster.org/1*4+b.cluster.org/2*4", ["b.cluster.org", "a.cluster.org"]),  # its order
        ("", []),  # not started
        ("node1/0+bad,name/0+[x]/1", ["node1"]),  # what is no host name is left out
    ],
)
def test_every_execution_host_is_kept_once_in_pbs_order(exec_host, hosts):
    assert job(exec_host).hosts == hosts
    assert hostlist.expand(job(exec_host).host) == hosts  # what the connect proxy and the agents' endpoint read
    assert job(exec_host).status().host == job(exec_host).host


def test_a_multi_node_job_of_qstat_f_keeps_all_its_hosts():
    text = "Job Id: 9.pbs\n    job_state = R\n    exec_host = gpu01.hpc.example.org/0*8+gpu02.hpc.example.org/0*8\n"
    assert qstat_full(text)[0].status().host == "gpu01.hpc.example.org,gpu02.hpc.example.org"


def test_many_hosts_are_compressed_to_ranges_rather_than_cut():
    names = [f"gpu{n:03d}.hpc.example.org" for n in range(1, 65)]
    text = job("+".join(f"{n}/0*8" for n in names)).host
    assert len(",".join(names)) > HOST_CHARS  # the names alone would not fit
    assert text == "gpu[001-064].hpc.example.org"
    assert hostlist.expand(text) == names


def test_hosts_that_fit_nowhere_are_cut_and_said(caplog):
    names = [f"host-{chr(97 + n % 26)}{n}x.example.org" for n in range(40)]  # no two neighbours share a range
    with caplog.at_level(logging.WARNING, logger="gridlane.pbs"):
        text = job("+".join(f"{n}/0" for n in names)).host
    assert len(text) <= HOST_CHARS
    kept = hostlist.expand(text)
    assert kept == names[: len(kept)]
    assert 0 < len(kept) < len(names)
    assert f"runs on 40 hosts; Gridlane keeps the first {len(kept)}" in caplog.text


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["node01", "node02", "node03", "node07"], "node[01-03,07]"),
        (["node3", "node1"], "node[3,1]"),  # PBS's order, not sorted: the first runs the script
        (["node09", "node10", "node11"], "node[09-11]"),
        (["node9", "node10"], "node[9-10]"),
        (["node9", "node010"], "node[9,010]"),  # widths as written
        (["a1", "b1", "a2"], "a1,b1,a2"),  # only neighbours merge
        (["login", "gpu1.x.org", "gpu2.x.org", "gpu3.y.org"], "login,gpu[1-2].x.org,gpu3.y.org"),
        (["7", "8"], "7,8"),  # no head: listed as they are
        ([], ""),
    ],
)
def test_compress_writes_slurm_s_ranges(names, text):
    assert hostlist.compress(names) == text
    assert hostlist.expand(text) == names


host_name = st.builds(
    lambda head, number, width, domain: f"{head}{number:0{width}d}{domain}",
    st.sampled_from(["n", "gpu", "node-", "cpu_a"]),
    st.integers(0, 120),
    st.integers(1, 3),
    st.sampled_from(["", ".hpc.example.org", ".b1.org"]),
) | st.sampled_from(["login", "head.example.org"])


@given(st.lists(host_name, max_size=60, unique=True))
def test_compressed_lists_expand_to_the_same_names_in_the_same_order(names):
    assert hostlist.expand(hostlist.compress(names)) == names
    text, left_out = hostlist.fitting(names, HOST_CHARS)
    assert len(text) <= HOST_CHARS
    assert hostlist.expand(text) == names[: len(names) - left_out]
