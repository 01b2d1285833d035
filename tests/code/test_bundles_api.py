"""Code bundles through the API: uploaded once per team, never seen by another team, refused when unsafe or too big,
and fetched by a job with its own secret only."""

from __future__ import annotations

import hashlib

import pytest

from portal.code.models import Bundle
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.fabrics.travel.helpers import archive


def put(client, digest: str, body: bytes, group: str = ""):
    where = f"/api/v1/code/{digest}/" + (f"?group={group}" if group else "")
    return client.generic("PUT", where, body, content_type="application/gzip")


def test_a_bundle_is_kept_once_and_a_second_upload_changes_nothing(api_as, alice, project, code_dir):
    body, digest = project
    client = api_as(alice)
    assert client.head(f"/api/v1/code/{digest}/").status_code == 404
    first = put(client, digest, body)
    assert (first.status_code, first.json()["created"]) == (201, True)
    assert put(client, digest, body).json() == {"digest": digest, "group": "vision", "created": False}
    looked = client.head(f"/api/v1/code/{digest}/")
    assert looked.status_code == 200
    assert looked["Gridlane-Code-Max-Bytes"] == str(100 * 1024 * 1024)
    assert b"".join(client.get(f"/api/v1/code/{digest}/").streaming_content) == body
    assert (code_dir / digest[:2] / f"{digest}.tar.gz").read_bytes() == body
    assert list((code_dir / digest[:2]).glob(".upload-*")) == []  # nothing half-written left behind
    row = Bundle.objects.get()
    assert (row.group.slug, row.size, row.unpacked, row.uploaded_by) == ("vision", len(body), 10, alice)


def test_another_team_never_sees_fetches_or_runs_a_teams_bundle(api_as, alice, charlie, submit, project):
    body, digest = project
    put(api_as(alice), digest, body)
    other = api_as(charlie)
    assert other.head(f"/api/v1/code/{digest}/").status_code == 404
    assert other.get(f"/api/v1/code/{digest}/").status_code == 404
    refused_team = other.get(f"/api/v1/code/{digest}/?group=vision")
    assert refused_team.json() == {"errors": {"group": ["You have no team 'vision'."]}}
    with pytest.raises(services.SubmitRejected) as refused:
        submit(charlie, code={"digest": digest})
    assert list(refused.value.errors) == ["code.digest"]
    # Charlie's team may upload the same bytes: then it is charlie's team's too, and the file on disk is one.
    assert put(other, digest, body).status_code == 201
    assert other.head(f"/api/v1/code/{digest}/").status_code == 200
    assert Bundle.objects.filter(digest=digest).count() == 2


@pytest.mark.parametrize(
    ("body", "named", "want"),
    [
        (b"not gzip", None, "not a .tar.gz"),
        (archive([("../evil.py", "file", "x")]), None, "outside its directory"),
        (archive([("l", "symlink", "/etc/passwd")]), None, "links outside"),
        (archive([("a.py", "file", "x")]), "0" * 64, "not " + "0" * 64),
    ],
    ids=["not an archive", "a path out", "a link out", "not the bytes named"],
)
def test_an_upload_that_is_not_a_safe_archive_of_the_bytes_named_is_refused(api_as, alice, body, named, want, code_dir):
    digest = named or hashlib.sha256(body).hexdigest()
    answer = put(api_as(alice), digest, body)
    assert answer.status_code == 400
    assert want in answer.json()["errors"]["detail"][0]
    assert not Bundle.objects.exists()
    assert [p.name for p in code_dir.rglob("*") if p.is_file()] == []


def test_a_bundle_over_the_sites_cap_is_413_packed_or_unpacked(api_as, alice, settings):
    settings.GRIDLANE_CODE_MAX_MB = 0.01  # about 10 KB
    client = api_as(alice)
    big = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(1000))  # 32 KB that gzip cannot shrink
    packed = archive([("noise.bin", "file", big.decode("latin-1"))])
    answer = put(client, hashlib.sha256(packed).hexdigest(), packed)
    assert answer.status_code == 413
    assert "larger than this site's limit of 0.01 MB" in answer.json()["errors"]["detail"][0]
    bomb = archive([("zeros.txt", "file", "0" * 200_000)])  # a few hundred bytes packed, 200 KB unpacked
    answer = put(client, hashlib.sha256(bomb).hexdigest(), bomb)
    assert answer.status_code == 413
    assert "unpacks to more than" in answer.json()["errors"]["detail"][0]


def test_a_bad_digest_or_a_team_not_yours_is_400(api_as, alice, project):
    body, _ = project
    client = api_as(alice)
    assert put(client, "ABC", body).json()["errors"]["digest"]
    assert put(client, hashlib.sha256(body).hexdigest(), body, group="fraud").json()["errors"]["group"]


def test_a_job_fetches_its_own_bundle_with_its_secret_and_nothing_else(client, api_as, alice, bob, submit, project):
    body, digest = project
    put(api_as(alice), digest, body)
    mine = submit(alice, code={"digest": digest})
    plain = submit(bob, command="true")
    where = f"/api/v1/workloads/{mine.pk}/code/"
    own = f"Bearer {notebook_endpoint.secret(mine.run_id)}"
    assert b"".join(client.get(where, HTTP_AUTHORIZATION=own).streaming_content) == body
    for wrong in (f"Bearer {notebook_endpoint.secret(plain.run_id)}", "Bearer nope", ""):
        assert client.get(where, HTTP_AUTHORIZATION=wrong).status_code == 404
    its_own = f"Bearer {notebook_endpoint.secret(plain.run_id)}"  # a workload without a bundle has none to give
    assert client.get(f"/api/v1/workloads/{plain.pk}/code/", HTTP_AUTHORIZATION=its_own).status_code == 404
    Workload.objects.filter(pk=mine.pk).update(state=State.SUCCEEDED)
    assert client.get(where, HTTP_AUTHORIZATION=own).status_code == 404


BAD_CODE = [
    ({"git": "--upload-pack=touch /tmp/x", "commit": "a" * 40}, "code.git"),
    ({"git": "https://git.example.org/a b.git", "commit": "a" * 40}, "code.git"),
    ({"git": "file:///etc", "commit": "a" * 40}, "code.git"),
    ({"git": "https://git.example.org/ml.git;rm -rf ~", "commit": "a" * 40}, "code.git"),
    ({"git": "https://git.example.org/ml.git", "commit": "main"}, "code.commit"),
    ({"digest": "abc"}, "code.digest"),
    ({"digest": "a" * 64, "git": "x"}, "code"),
    ("a string", "code"),
]


@pytest.mark.parametrize(("code", "field"), BAD_CODE, ids=[str(c[0])[:40] for c in BAD_CODE])
def test_a_code_reference_that_is_not_one_is_400_naming_the_field(api_as, alice, code, field):
    answer = api_as(alice).post(
        "/api/v1/workloads/", {"queue": "train", "name": "t", "command": "python train.py", "code": code}, format="json"
    )
    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == [field]


def test_requirements_and_code_are_checked_against_what_they_travel_with(api_as, alice):
    client = api_as(alice)

    def errors(**body):
        answer = client.post("/api/v1/workloads/", {"queue": "train", "name": "t", **body}, format="json")
        return answer.json()["errors"]

    assert errors(command="true", requirements="x" * 70_000) == {
        "requirements": ["The requirements are longer than 64 KiB."]
    }
    script = "#!/bin/bash\n#SBATCH --nodes=1\nsrun true\n"
    assert "code" in errors(script=script, requirements="numpy\n")


def test_the_api_answers_with_the_code_and_the_job_gets_where_to_fetch_it(api_as, alice, settings):
    from portal.worker.dispatch import job_spec

    settings.GRIDLANE_PUBLIC_URL = "https://grid.example.org"
    code = {"git": "git@git.example.org:ml/train.git", "commit": "c" * 40}
    answer = api_as(alice).post("/api/v1/workloads/", {
        "queue": "train", "name": "t", "command": "python train.py", "code": code, "requirements": "numpy==2.1\n",
    }, format="json")  # fmt: skip
    assert answer.status_code == 201, answer.json()
    assert (answer.json()["code"], answer.json()["requirements"]) == (code, "numpy==2.1\n")
    env = job_spec(Workload.objects.get(pk=answer.json()["id"])).env
    assert env["GRIDLANE_CODE_GIT"] == code["git"]
    assert env["GRIDLANE_CODE_COMMIT"] == code["commit"]
    assert env["GRIDLANE_REQUIREMENTS"] == "numpy==2.1\n"


def test_the_workload_page_shows_the_code_it_runs(client, alice, submit, api_as, project):
    body, digest = project
    put(api_as(alice), digest, body)
    w = submit(alice, code={"digest": digest}, requirements="tinypkg\n")
    client.force_login(alice)
    page = client.get(w.get_absolute_url()).content.decode()
    assert f"bundle sha256:{digest}" in page
    assert "tinypkg" in page
