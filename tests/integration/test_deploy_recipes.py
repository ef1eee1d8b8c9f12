"""The cluster recipes in ``deploy/`` stay runnable: each is read as its tool would read it.

No network, Docker or Kubernetes: the Dockerfile is parsed here (its instructions, its shell), the
``ray up`` config is validated against the JSON schema Ray ships in its wheel and its ``ray start``
lines are parsed by Ray's own CLI, and the KubeRay RayJob is checked field by field (its CRD schema
is not available offline). Every autotune command line in them is parsed by the real
``python -m autotune.search`` parser, and versions are read from ``pyproject.toml``, so bumping
SGLang or Ray there without the recipes fails here.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema  # a dependency of ray itself, so always here beside the schema it checks
import pytest
import yaml

from autotune.cli.search import build_parser
from autotune.search.cluster import EXCLUSIVE_RESOURCE

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RAY_SCHEMA = Path(__import__("ray").__file__).parent / "autoscaler" / "ray-schema.json"


def _pinned(requirements: list[str], name: str) -> str:
    """The version ``name==X`` pins in a list of requirements."""
    for req in requirements:
        m = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==([\w.*]+)", req.replace(" ", ""))
        if m:
            return m.group(2)
    raise AssertionError(f"pyproject.toml pins no {name}== in {requirements}")


SGLANG = _pinned(PYPROJECT["project"]["optional-dependencies"]["sglang"], "sglang")
RAY = _pinned(PYPROJECT["project"]["dependencies"], "ray")  # "2.60.*"
# pyproject's version is dynamic: autotune.__version__ is the one place it is written.
from autotune import __version__ as VERSION  # noqa: E402

# ---- shell and command lines ------------------------------------------------------------------

def _commands(shell: str) -> list[list[str]]:
    """Simple commands of a shell line, split at ``&&``, ``||``, ``;`` and ``|``; leading
    ``NAME=value`` assignments dropped. Enough for the recipes' one-line scripts."""
    lexer = shlex.shlex(shell, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    out: list[list[str]] = [[]]
    for tok in lexer:
        if tok in ("&&", "||", ";", "|"):
            out.append([])
        else:
            out[-1].append(tok)
    cmds = []
    for cmd in out:
        while cmd and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", cmd[0]):
            cmd = cmd[1:]
        if cmd:
            cmds.append(cmd)
    return cmds


def _search_argv(shell: str) -> tuple[list[str], list[list[str]]]:
    """(the arguments of the one ``python -m autotune.search`` in ``shell``, the commands before it)."""
    cmds = _commands(shell)
    hits = [i for i, c in enumerate(cmds)
            if c[0] in ("python", "python3") and c[1:3] == ["-m", "autotune.search"]]
    assert len(hits) == 1, f"expected one python -m autotune.search in {shell!r}, found {len(hits)}"
    return cmds[hits[0]][3:], cmds[:hits[0]]


def _parse_search(argv: list[str]):
    """The search's own parser on ``argv``; a recipe it rejects fails the test with its message."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse prints why to stderr, which pytest shows
        pytest.fail(f"python -m autotune.search rejects {argv} (exit {exc.code})")


def _cwd(before: list[list[str]]) -> str:
    """The directory the commands before the search ``cd`` into."""
    cds = [c[1] for c in before if c[0] == "cd"]
    assert cds, "the search must cd into its working directory (it keeps mlruns/ there)"
    return cds[-1]


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def test_search_command_helpers_catch_bad_lines():
    """The helpers above really reject what a broken recipe would hold."""
    args, before = _search_argv("mkdir -p /w && cd /w && python3 -m autotune.search --space s.yaml")
    assert _parse_search(args).space == "s.yaml" and _cwd(before) == "/w"
    with pytest.raises(pytest.fail.Exception):
        _parse_search(["--space", "s.yaml", "--adress", "auto"])  # misspelt flag
    with pytest.raises(pytest.fail.Exception):
        _parse_search(["--address", "auto"])  # --space is required
    with pytest.raises(AssertionError):
        _search_argv("python3 -m autotune.trial --space s.yaml")


# ---- Dockerfile -------------------------------------------------------------------------------

def _dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of deploy/Dockerfile: comments and blank lines dropped (also
    inside continued lines, as Docker does), backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], text)


def _from_image() -> str:
    """The FROM image, with the ARGs declared before it substituted."""
    args: dict[str, str] = {}
    for word, rest in _dockerfile():
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            return _substitute(rest.split()[0], args)
    raise AssertionError("Dockerfile has no FROM")


def _workdir() -> str:
    dirs = [rest for word, rest in _dockerfile() if word == "WORKDIR"]
    assert dirs, "Dockerfile sets no WORKDIR"
    return dirs[-1]


def test_dockerfile_parser_reads_instructions():
    steps = _dockerfile()
    words = [w for w, _ in steps]
    assert words[:2] == ["ARG", "FROM"] and "RUN" in words and "CMD" in words
    # A continued RUN is one instruction holding all its lines.
    run = next(r for w, r in steps if w == "RUN" and "pip install" in r)
    assert "\\" not in run and run.count("&&") >= 3


def test_dockerfile_builds_on_the_pinned_sglang_image():
    """lmsysorg/sglang:v<the sglang extra's version>: bumping one without the other fails."""
    assert _from_image() == f"lmsysorg/sglang:v{SGLANG}"


def _pin_pattern(cmds: list[list[str]]) -> str:
    greps = [c for c in cmds if c[0] == "grep" and "-iE" in c]
    assert greps, "the image's versions are not captured with grep -iE"
    return greps[0][greps[0].index("-iE") + 1]


def test_dockerfile_installs_autotune_without_touching_torch_or_sglang():
    run = next(r for w, r in _dockerfile() if w == "RUN" and "pip install" in r)
    cmds = _commands(run)
    installs = [c for c in cmds if c[:4] == ["python3", "-m", "pip", "install"]]
    assert len(installs) == 1, cmds
    pip = installs[0][4:]
    targets = [a for i, a in enumerate(pip) if not a.startswith("-") and pip[i - 1] != "-c"]
    # The project itself, from where its sources were copied, without the sglang extra.
    assert targets == [_workdir()], targets
    for bad in ("--force-reinstall", "--upgrade", "-U", "--no-deps", "--ignore-installed", "-I"):
        assert bad not in pip, f"pip install {bad} would disturb the image's packages"
    assert not any(re.match(r"(torch|sglang)\b", t) or "[" in t for t in targets)
    # Installed under constraints pinning what the image has: torch and SGLang stay as they are.
    constraints = pip[pip.index("-c") + 1]
    pattern = _pin_pattern(cmds)
    written = [c for c in cmds if c[-2:] == [">", constraints]]
    assert written, f"nothing writes {constraints}"
    keep = ["torch==2.14.1+cu130", "sglang==0.5.23", "sgl-kernel==0.3.21",
            "flashinfer-python==0.6.4", "triton==3.5.0", "nvidia-nccl-cu13==2.28.3"]
    free = ["ray==2.60.0", "mlflow==3.17.2", "optuna==5.0.0", "httpx==0.28.1", "numpy==2.1.0"]
    assert all(re.search(pattern, p, re.I) for p in keep), pattern
    assert not any(re.search(pattern, p, re.I) for p in free), pattern
    # ... and checked after the install: the same versions listed again must diff clean.
    assert any(c[:2] == ["diff", constraints] for c in cmds)
    assert sum(1 for c in cmds if c[0] == "grep" and pattern in c) == 2
    # The image's SGLang is the pinned release (the build refuses another).
    assert any(c[:2] == ["python3", "-c"] and "sglang.__version__" in c[2] and "${SGLANG_VERSION}" in c[2]
               for c in cmds)


def test_dockerfile_copies_what_the_install_and_cmd_read():
    copied: set[str] = set()
    for word, rest in _dockerfile():
        if word == "COPY":
            parts = rest.split()
            copied.update(p.rstrip("/") for p in parts[:-1] if not p.startswith("--"))
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"], "autotune", "search_spaces"}
    assert needed <= copied, needed - copied
    assert all((ROOT / src).exists() for src in copied), copied


def test_dockerfile_cmd_is_a_search_and_there_is_no_entrypoint():
    words = dict(_dockerfile())
    # ray up runs the container as `docker run ... IMAGE bash`: an ENTRYPOINT would eat the `bash`.
    assert "ENTRYPOINT" not in words
    cmd = json.loads(words["CMD"])  # exec form
    assert cmd[:3] == ["python3", "-m", "autotune.search"]
    args = _parse_search(cmd[3:])
    # WORKDIR holds the repository's search_spaces/, so the path resolves as it does here.
    assert (ROOT / args.space).is_file()
    assert args.address is None  # standalone: an embedded Ray, no cluster to join


# ---- ray up -----------------------------------------------------------------------------------

def _ray_cluster() -> dict:
    return yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())


def test_ray_cluster_config_matches_rays_schema():
    schema = json.loads(RAY_SCHEMA.read_text())
    config = _ray_cluster()
    jsonschema.validate(config, schema)
    # The schema really is enforced: a fractional resource or an unknown key is refused.
    broken = json.loads(json.dumps(config))
    broken["available_node_types"]["gpu8"]["resources"]["GPU"] = 0.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**config, "worker_nodes_typo": {}}, schema)


def _space_from_cluster_path(config: dict, path: str) -> Path:
    """The local file that ``file_mounts`` copies to ``path`` on the nodes."""
    for dst, src in config.get("file_mounts", {}).items():
        if _under(path, [dst]):
            return (ROOT / src / Path(path).relative_to(dst)).resolve()
    raise AssertionError(f"{path} is not under any file_mounts destination: trials could not read it")


def test_ray_cluster_gpu_workers_declare_gpu_and_autotune_node():
    from autotune.space.search_space import load_space

    config = _ray_cluster()
    head = config["head_node_type"]
    workers = {k: v for k, v in config["available_node_types"].items() if k != head}
    assert workers
    gpu_types = {k: v["resources"] for k, v in workers.items() if v["resources"].get("GPU", 0) > 0}
    assert gpu_types, "no worker node type declares GPUs"
    for name, res in gpu_types.items():
        # exclusive_node spaces ask for the whole resource once per trial (search.cluster).
        assert res.get(EXCLUSIVE_RESOURCE) == 1, (name, res)
    # The driver's node runs no trials.
    assert config["available_node_types"][head]["resources"].get("GPU", 0) == 0
    # The largest trial of the space the recipe searches fits one GPU node.
    args = _parse_search(_search_argv(config["metadata"]["autotune_search"])[0])
    space = load_space(_space_from_cluster_path(config, args.space))
    assert max(space.tp_sizes()) <= max(r["GPU"] for r in gpu_types.values())


def _ray_start(command: str):
    """Ray's own ``ray start`` CLI on the ``ray start`` of a start command; its parsed options."""
    from ray.scripts.scripts import start

    cmds = [c for c in _commands(command) if c[:2] == ["ray", "start"]]
    assert len(cmds) == 1, command
    return start.make_context("ray start", cmds[0][2:]).params


def test_ray_cluster_start_commands_parse_with_ray_start():
    config = _ray_cluster()
    heads = [_ray_start(c) for c in config["head_start_ray_commands"] if "ray start" in c]
    workers = [_ray_start(c) for c in config["worker_start_ray_commands"] if "ray start" in c]
    assert len(heads) == 1 and len(workers) == 1
    head, worker = heads[0], workers[0]
    assert head["head"] and not worker["head"]
    assert worker["address"] == f"$RAY_HEAD_IP:{head['port']}"
    # Node types' resources reach Ray through the autoscaler; a flag here would contradict them.
    for params in (head, worker):
        assert params["resources"] in (None, "{}") and params["num_gpus"] is None


def test_ray_cluster_search_command_runs_from_shared_storage():
    config = _ray_cluster()
    argv, before = _search_argv(config["metadata"]["autotune_search"])
    args = _parse_search(argv)
    assert args.address == "auto"
    assert args.tracking_uri and args.tracking_uri.startswith("http")
    shared = [o.split()[1].split(":")[1] for o in config["docker"]["run_options"] if o.startswith("-v ")]
    assert _under(_cwd(before), shared), (before, shared)
    assert args.json and _under(args.output, shared)
    assert _space_from_cluster_path(config, args.space).is_file()
    # The working directory exists before the search runs.
    assert any(c.split()[:2] == ["mkdir", "-p"] and _cwd(before) in c.split()
               for c in config["head_setup_commands"])


# ---- KubeRay RayJob ---------------------------------------------------------------------------

def _rayjob() -> dict:
    return yaml.safe_load((DEPLOY / "kuberay-rayjob.yaml").read_text())


def _containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def _shared_mounts(group: dict) -> dict[str, str]:
    """PVC claim name -> mount path, for the group's first container."""
    spec = group["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
    return {claims[m["name"]]: m["mountPath"]
            for m in _containers(group)[0].get("volumeMounts", []) if m["name"] in claims}


def test_rayjob_runs_a_search_command():
    job = _rayjob()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    argv, before = _search_argv(job["spec"]["entrypoint"])
    args = _parse_search(argv)
    assert args.address == "auto"
    head_mounts = list(_shared_mounts(job["spec"]["rayClusterSpec"]["headGroupSpec"]).values())
    assert _under(_cwd(before), head_mounts) and _under(args.space, head_mounts)
    assert args.json and _under(args.output, head_mounts)


def _kuberay_resources(value: str) -> dict:
    """What ``ray start --resources=<value>`` gets: KubeRay pastes the value into a shell line."""
    words = shlex.split(f"--resources={value}")
    assert len(words) == 1, f"the shell splits --resources={value} into {words}"
    return json.loads(words[0].removeprefix("--resources="))


def test_rayjob_cluster_has_head_and_gpu_workers_with_autotune_node():
    cluster = _rayjob()["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"].startswith(RAY.rstrip("*"))  # the ray[tune] pin, e.g. "2.60."
    head = cluster["headGroupSpec"]
    assert _containers(head) and "nvidia.com/gpu" not in _containers(head)[0]["resources"].get("limits", {})
    gpu_groups = [g for g in cluster["workerGroupSpecs"]
                  if int(_containers(g)[0]["resources"]["limits"].get("nvidia.com/gpu", 0)) > 0]
    assert gpu_groups, "no worker group has an nvidia.com/gpu limit"
    for group in gpu_groups:
        assert _kuberay_resources(group["rayStartParams"]["resources"]) == {EXCLUSIVE_RESOURCE: 1}
        # Trials write into the search's working directory: the same claim at the same path.
        assert _shared_mounts(group) == _shared_mounts(head) != {}
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    # The format check is real: plain JSON (one level of quoting too few) is split by the shell.
    with pytest.raises(AssertionError):
        _kuberay_resources('{"autotune_node": 1}')


# ---- across the recipes -----------------------------------------------------------------------

def _images() -> list[str]:
    spec = _rayjob()["spec"]["rayClusterSpec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [_ray_cluster()["docker"]["image"]] + [c["image"] for g in groups for c in _containers(g)]


def test_recipes_use_the_image_tag_the_dockerfile_documents():
    """<registry>/autotune:<autotune version>-sglang<SGLang version>, as the Dockerfile's build
    line tags it; the versions are pyproject's."""
    build = re.search(r"docker build -f deploy/Dockerfile -t (\S+) \.", (DEPLOY / "Dockerfile").read_text())
    assert build, "the Dockerfile documents no docker build line"
    tag = build.group(1)
    assert tag.endswith(f"/autotune:{VERSION}-sglang{SGLANG}"), tag
    assert set(_images()) == {tag}


def test_recipes_leave_nccl_settings_to_the_spaces():
    """NCCL_* are search parameters and spaces' fixed_env (NCCL_NVLS_ENABLE=0 there): set in an
    image or pod, a value would reach every trial, the no-NCCL_ALGO baseline included."""
    docker_lines = " ".join(rest for _, rest in _dockerfile())
    assert "NCCL_" not in docker_lines
    for recipe in (_ray_cluster(), _rayjob()):
        assert "NCCL_" not in json.dumps(recipe)


def test_deploy_readme_exec_line_is_the_configs_search_command():
    """deploy/README.md's `ray exec` line is the command the config holds (and the test parses)."""
    text = (DEPLOY / "README.md").read_text().replace("\\\n", " ")
    m = re.search(r'ray exec --tmux deploy/ray-cluster\.yaml "([^"]+)"', text)
    assert m, "deploy/README.md shows no ray exec line"
    assert m.group(1).split() == _ray_cluster()["metadata"]["autotune_search"].split()
