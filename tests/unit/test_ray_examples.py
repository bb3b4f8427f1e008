"""The KubeRay manifests under examples/ agree with the code: the commands they run parse with
abtui's own argument parser, the extra and the versions they install exist, the session file
lands on a volume the user can copy it from, and the pods fit the generators the command asks
for. Needs no Ray and no cluster. The structure checks read the YAML with PyYAML where it is
importable (Ray brings it; abtui does not depend on it) and skip, saying so, where it is not;
the command checks read the files line by line and always run."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

import abtui
from abtui.cli import build_parser
from abtui.spec.model import RaySpec

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "kuberay-abtui.yaml"
CLUSTER = ROOT / "examples" / "kuberay-raycluster.yaml"
ARMS = 2  # the examples' specs are an A/B: one baseline, one candidate


def _entrypoint(text: str) -> str:
    """The RayJob's ``entrypoint: >-`` folded scalar, read line by line (no YAML parser)."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        m = re.match(r"^(\s*)entrypoint:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2) not in (">-", ">", "|", "|-"):
            return m.group(2).strip().strip("\"'")
        body, indent = [], len(m.group(1))
        for nxt in lines[k + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt.strip())
        return " ".join(x for x in body if x)
    raise AssertionError("no entrypoint in the RayJob")


def _commented_commands(text: str) -> list[str]:
    """``abtui run …`` commands the comments tell the user to type."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^#\s+(abtui run .*?)(\s+#.*)?$", line)
        if m:
            out.append(m.group(1).split(" && ")[0])
    return out


def _parse(cmd: str):
    argv = shlex.split(cmd)
    assert argv[0] == "abtui", cmd
    return build_parser().parse_args(argv[1:])


def test_the_commands_parse_with_abtuis_own_parser():
    job = _parse(_entrypoint(JOB.read_text()))
    assert job.command == "run" and job.headless  # no terminal in a Ray job
    assert job.ray in ("auto", "")  # the cluster it runs on ("" = $RAY_ADDRESS, set by Ray Jobs)
    assert job.spec and job.sessions_dir and job.generators
    cmds = _commented_commands(CLUSTER.read_text())
    assert cmds, "the RayCluster example shows no `abtui run` command"
    for cmd in cmds:
        a = _parse(cmd)
        assert a.command == "run" and a.ray and a.ray.startswith("ray://"), cmd


def test_the_image_installs_this_abtui_with_an_extra_that_exists():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for path in (JOB, CLUSTER):
        text = path.read_text()
        pins = re.findall(r"pip install 'abtui\[(\w+)\]==([\w.]+)'", text)
        assert pins, f"{path.name}: no `pip install 'abtui[ray]==VERSION'` for the image"
        for extra, version in pins:
            assert extra in extras, f"{path.name}: abtui has no extra {extra!r}"
            assert version == abtui.__version__, (path.name, version)  # the run checks it


def _yaml(path: Path) -> list[dict]:
    yaml = pytest.importorskip(
        "yaml",
        reason="PyYAML is not installed (Ray brings it): the "
        "structure checks need it; the command checks ran without it",
    )
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _ray_lower_bound() -> tuple[int, ...]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (req,) = [r for r in extras["ray"] if r.startswith("ray")]
    return tuple(int(x) for x in re.search(r">=\s*([\d.]+)", req).group(1).split("."))


def _cluster_checks(name: str, cluster: dict, text: str, generators: int | None) -> None:
    version = tuple(int(x) for x in cluster["rayVersion"].split("."))
    assert version >= _ray_lower_bound(), f"{name}: rayVersion below the `ray` extra's bound"
    assert f"rayproject/ray:{cluster['rayVersion']}-" in text, f"{name}: image base vs rayVersion"
    head = cluster["headGroupSpec"]
    assert str(head["rayStartParams"].get("num-cpus")) == "0", f"{name}: generators on the head"
    (hc,) = head["template"]["spec"]["containers"]
    ports = {p["containerPort"] for p in hc.get("ports", [])}
    assert {6379, 8265, 10001} <= ports, (name, ports)
    (wg,) = cluster["workerGroupSpecs"]
    (wc,) = wg["template"]["spec"]["containers"]
    assert wc["image"] == hc["image"], f"{name}: head and workers must run the same abtui"
    need = ARMS * RaySpec().cpus_per_generator  # one generator of each arm per pod (a bundle)
    assert float(wc["resources"]["limits"]["cpu"]) >= need, name
    if generators is not None:  # spread: one pod per generator index
        assert wg["replicas"] == wg["minReplicas"] == wg["maxReplicas"] == generators, name


def test_the_rayjob_runs_on_the_head_and_leaves_the_session_on_a_claim():
    text = JOB.read_text()
    docs = {d["kind"]: d for d in _yaml(JOB)}
    assert set(docs) == {"PersistentVolumeClaim", "RayJob"}
    job = docs["RayJob"]
    assert job["apiVersion"] == "ray.io/v1"
    args = _parse(job["spec"]["entrypoint"])
    assert job["spec"]["entrypoint"] == _entrypoint(text)  # the line reader reads what YAML does
    cluster = job["spec"]["rayClusterSpec"]
    _cluster_checks(JOB.name, cluster, text, args.generators)
    head = cluster["headGroupSpec"]
    # a RayJob is submitted through the dashboard's job API: it must not be switched off
    assert str(head["rayStartParams"].get("include-dashboard", "true")).lower() != "false"
    (hc,) = head["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in hc["volumeMounts"]}
    volumes = {v["name"]: v for v in head["template"]["spec"]["volumes"]}
    # the session file: under --sessions-dir, a volume backed by the claim this file creates
    sessions = volumes[mounts[args.sessions_dir]]
    claim = sessions["persistentVolumeClaim"]["claimName"]
    assert claim == docs["PersistentVolumeClaim"]["metadata"]["name"]
    # the spec: a file of a mounted ConfigMap
    spec_dir = str(Path(args.spec).parent)
    assert "configMap" in volumes[mounts[spec_dir]]
    cm = volumes[mounts[spec_dir]]["configMap"]["name"]
    assert f"kubectl create configmap {cm} --from-file={Path(args.spec).name}" in text
    assert job["spec"]["ttlSecondsAfterFinished"] > 0 and f"{args.sessions_dir}" in text


def test_the_raycluster_serves_ray_client_where_the_comments_say():
    text = CLUSTER.read_text()
    (cluster,) = _yaml(CLUSTER)
    assert cluster["kind"] == "RayCluster" and cluster["apiVersion"] == "ray.io/v1"
    name = cluster["metadata"]["name"]
    assert f"svc/{name}-head-svc 10001:10001" in text  # KubeRay's head service: <name>-head-svc
    gens = {_parse(c).generators for c in _commented_commands(text)}
    _cluster_checks(CLUSTER.name, cluster["spec"], text, gens.pop() if len(gens) == 1 else None)
