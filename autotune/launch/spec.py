"""What one server launch is: model, flags and environment, and its renderings.

A :class:`LaunchSpec` turns into the argv that :mod:`autotune.server.process` runs, the shell script and
SGLang ``--config`` YAML that :mod:`autotune.export.launch_command` writes, and the JSON that MLflow keeps. The
``sglang`` and ``sim`` backends get the same flags and environment; only the module differs.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from autotune.backend import BACKENDS
from autotune.names import is_env_name
from autotune.sglang import args as sglang_args
from autotune.sglang import flags as sglang_flags

# Set from the spec's own fields, so a server-args mapping must not carry them too.
_FIELD_ARGS = ("model_path", "speculative_draft_model_path", "host", "port")

TRIAL_ONLY_ENV = "AUTOTUNE_TRIAL_ONLY_ARGS"
"""Carries :attr:`LaunchSpec.trial_only` through records that keep only argv and env (a trial's
``TrialResult.env``): comma-separated arg names. A spec built with it in ``env`` moves it into
``trial_only``; the server never sees it."""

_ARG_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def env_value(value: Any) -> str:
    """An environment value as text: booleans become ``1``/``0``, the rest ``str()``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


@dataclass(frozen=True)
class LaunchSpec:
    """One server launch.

    Attributes:
        model_path: The target model (``--model-path``).
        draft_model_path: The speculative draft model (``--speculative-draft-model-path``), if any.
        server_args: Other ``ServerArgs`` fields by underscore name -> value; None values are left
            out of the command line.
        env: Environment variables to set for the server (``NCCL_ALGO`` -> ``Ring``).
        backend: A name in :data:`~autotune.backend.BACKENDS`: ``"sglang"`` (the real
            server) or ``"sim"`` (the emulator).
        host: The address the server binds.
        port: The port, or None to leave it to the caller (:mod:`autotune.server.process` picks a free one)
            or, in an exported script, to SGLang's default.
        trial_only: Server args that only trial servers get (``measure.fast_start``'s
            ``disable_prefill_cuda_graph``): they run and are shown in the trial's command, but
            :mod:`autotune.export.launch_command` never writes them.

    Server-arg names are resolved against the SGLang in use
    (:func:`autotune.sglang.flags.active_flags`): a deprecated alias becomes its replacement's
    field (0.5.17's ``cuda_graph_max_bs`` -> ``cuda_graph_max_bs_decode``), and an ambiguous or
    unknown name raises :class:`~autotune.errors.LaunchArgsError` naming the candidates.
    """

    model_path: str
    draft_model_path: str | None = None
    server_args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    backend: str = "sglang"
    host: str = "127.0.0.1"
    port: int | None = None
    trial_only: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.model_path:
            raise ValueError("LaunchSpec.model_path is empty; give the target model's path or hub id")
        if self.backend not in BACKENDS:
            raise ValueError(f"LaunchSpec.backend {self.backend!r} is unknown; use one of {sorted(BACKENDS)}")
        if self.port is not None and not (0 < int(self.port) < 65536):
            raise ValueError(f"LaunchSpec.port {self.port} is not a TCP port (1-65535)")
        for name in dict(self.server_args):
            if not _ARG_NAME.fullmatch(name):
                raise ValueError(f"server arg {name!r} is not a ServerArgs field name (lower case, underscores)")
            if name in _FIELD_ARGS:
                raise ValueError(f"server arg {name!r} is a LaunchSpec field; set it there, not in server_args")
        env = {}
        trial_only = set(self.trial_only)
        for name, value in dict(self.env).items():
            if not is_env_name(name):
                raise ValueError(f"environment variable name {name!r} must be upper case (A-Z, 0-9, _)")
            if name == TRIAL_ONLY_ENV:
                trial_only |= {n for n in str(value).split(",") if n}
                continue
            env[name] = env_value(value)
        args, keys = sglang_args.canonical_args(self.server_args)
        missing = sorted(n for n in trial_only if keys.get(n, n) not in args)
        if missing:
            raise ValueError(f"trial-only args {missing} are not among the server args")
        # Copies, so a caller mutating its dict cannot change a frozen spec.
        object.__setattr__(self, "server_args", args)
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "trial_only", frozenset(keys.get(n, n) for n in trial_only))
        if self.port is not None:
            object.__setattr__(self, "port", int(self.port))

    @property
    def module(self) -> str:
        """The module run with ``python -m``."""
        return BACKENDS[self.backend].module

    def server_argv(self, *, port: int | None = None) -> list[str]:
        """The arguments after the module name, in a fixed order.

        Model, draft model, host and port come first, then the server args sorted by name, so the
        same config always gives the same command line.

        Args:
            port: Overrides the spec's port.
        """
        port = self.port if port is None else port
        head: dict[str, Any] = {
            "model_path": self.model_path,
            "speculative_draft_model_path": self.draft_model_path,
            "host": self.host,
            "port": port,
        }
        return sglang_args.args_to_argv(head) + sglang_args.args_to_argv(sorted(self.server_args.items()))

    def argv(self, *, python: str = sys.executable, port: int | None = None) -> list[str]:
        """The full command: ``[python, "-m", module, ...flags]``.

        Args:
            python: The interpreter.
            port: Overrides the spec's port.
        """
        return [python, "-m", self.module, *self.server_argv(port=port)]

    def shell_command(self, *, python: str = "python", port: int | None = None) -> str:
        """A copy-pasteable shell rendering: ``export`` lines, then the command, one flag per line.

        Every word is shell-quoted, so spaces, quotes and ``$`` in paths or values survive exactly.

        Args:
            python: The interpreter (quoted like everything else).
            port: Overrides the spec's port.
        """
        lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(self.env.items())]
        argv = self.argv(python=python, port=port)
        groups: list[list[str]] = [argv[:3]]
        for word in argv[3:]:
            if word.startswith("--"):
                groups.append([word])
            else:
                groups[-1].append(word)
        rendered = [" ".join(shlex.quote(w) for w in group) for group in groups]
        if self.trial_only:
            only = sglang_args.args_to_argv({k: v for k, v in self.server_args.items() if k in self.trial_only})
            lines.append("# trial-only (what this trial ran; never exported): "
                         + " ".join(w for w in only if w.startswith("--")))
        lines.append(" \\\n  ".join(rendered))
        return "\n".join(lines) + "\n"

    def validate(self, *, use_sglang: bool | None = None, model_arch: str | None = None) -> dict[str, Any]:
        """Check the command line with SGLang's parser (the built-in one without SGLang).

        Args:
            use_sglang: Force (True) or forbid (False) SGLang's parser; None uses it when installed.
            model_arch: The target's architecture, for auto-picked speculative values.

        Returns:
            The resolved server args (see :func:`autotune.sglang.args.parse_server_args`).

        Raises:
            LaunchArgsError: When the command line would be rejected.
        """
        return sglang_args.parse_server_args(self.server_argv(), use_sglang=use_sglang, model_arch=model_arch)

    def to_config_yaml(self) -> str:
        """The server args as an SGLang ``--config`` file.

        Run it with ``python -m sglang.launch_server --config FILE`` followed by
        :meth:`config_rest`, the flags SGLang's loader refuses in a file (``--x/--no-x`` pairs; in
        0.5.17 any field a deprecated alias shares): the first comment line gives that command. Keys
        are flag names without their dashes, which is what SGLang's loader needs. Environment
        variables cannot go in it; they are listed in a comment at the top.
        """
        mapping, rest = self._config_split()
        command = " ".join(["python -m sglang.launch_server --config <this file>",
                            *(shlex.quote(word) for word in rest)])
        comments = [f"# SGLang server config: {command}"]
        if rest:
            comments.append(f"# ({' '.join(w for w in rest if w.startswith('--'))} on the command line: "
                            f"{sglang_flags.active_flags().describe()}'s --config loader refuses it in a file)")
        if self.env:
            comments.append("# Set this environment first (SGLang's config file cannot carry it):")
            comments += [f"#   export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        body = yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False, allow_unicode=True)
        return "\n".join(comments) + "\n" + body

    def config_rest(self) -> list[str]:
        """The flags that go on the command line beside ``--config FILE`` (see :meth:`to_config_yaml`)."""
        return self._config_split()[1]

    def _config_split(self) -> tuple[dict[str, Any], list[str]]:
        head: dict[str, Any] = {
            "model_path": self.model_path,
            "speculative_draft_model_path": self.draft_model_path,
            "host": self.host,
            "port": self.port,
        }
        return sglang_args.config_and_rest({**head, **dict(sorted(self.server_args.items()))})

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready record: the fields, plus the argv (with ``python``) and env it runs with."""
        return {
            "backend": self.backend,
            "module": self.module,
            "model_path": self.model_path,
            "draft_model_path": self.draft_model_path,
            "host": self.host,
            "port": self.port,
            "server_args": dict(sorted(self.server_args.items())),
            "env": dict(sorted(self.env.items())),
            "trial_only": sorted(self.trial_only),
            "argv": self.argv(python="python"),
        }

    def record_env(self) -> dict[str, str]:
        """The env to keep in a trial's record: ``env`` plus :data:`TRIAL_ONLY_ENV` when needed.

        A spec rebuilt from a record's argv and this env (``LaunchSpec(..., env=record_env)``)
        gets its ``trial_only`` back.
        """
        env = dict(self.env)
        if self.trial_only:
            env[TRIAL_ONLY_ENV] = ",".join(sorted(self.trial_only))
        return env

    def without_trial_only(self) -> LaunchSpec:
        """The same launch without its trial-only args (what a user should run)."""
        args = {k: v for k, v in self.server_args.items() if k not in self.trial_only}
        return replace(self, server_args=args, trial_only=frozenset())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchSpec:
        """Rebuild a spec from :meth:`to_json` output (``module`` and ``argv`` are derived, so ignored)."""
        return cls(
            model_path=data["model_path"],
            draft_model_path=data.get("draft_model_path"),
            server_args=data.get("server_args") or {},
            env=data.get("env") or {},
            backend=data.get("backend", "sglang"),
            host=data.get("host", "127.0.0.1"),
            port=data.get("port"),
            trial_only=frozenset(data.get("trial_only") or ()),
        )

    def with_port(self, port: int | None) -> LaunchSpec:
        """The same launch on another port."""
        return replace(self, port=port)

    @classmethod
    def from_params(cls, *, model_path: str, draft_model_path: str | None = None,
                    fixed_args: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
                    fixed_env: Mapping[str, Any] | None = None, backend: str = "sglang",
                    host: str = "127.0.0.1", port: int | None = None) -> LaunchSpec:
        """Build a spec from a search space's fixed args and one trial's parameters.

        Names in all upper case (``NCCL_ALGO``) are environment variables; lower-case names are
        ``ServerArgs`` fields. None values (inactive conditional parameters) are dropped. Without a
        ``speculative_algorithm`` the launch is a no-speculation baseline: the draft model and
        every ``speculative_*`` arg are left out, so it differs from its speculative twin only by
        speculation.

        Args:
            model_path: The target model.
            draft_model_path: The draft model; a ``speculative_draft_model_path`` param overrides it.
            fixed_args: Args every trial shares.
            params: This trial's sampled values.
            fixed_env: Environment every trial shares.
            backend: ``"sglang"`` or ``"sim"``.
            host: The bind address, unless a ``host`` arg is given.
            port: The port, unless a ``port`` arg is given.

        Raises:
            ValueError: For a mixed-case name, a lower-case name in ``fixed_env``, or a name that
                fixed args and params set to different values.
        """
        args: dict[str, Any] = {}
        env: dict[str, str] = {}
        for name, value in (fixed_env or {}).items():
            if not is_env_name(name):
                raise ValueError(f"fixed env name {name!r} must be upper case (A-Z, 0-9, _)")
            if value is not None:
                env[name] = env_value(value)
        for source in (fixed_args or {}, params or {}):
            for name, value in source.items():
                if value is None:
                    continue
                if is_env_name(name):
                    target: dict[str, Any] = env
                    value = env_value(value)
                elif _ARG_NAME.fullmatch(name):
                    target = args
                else:
                    raise ValueError(f"parameter {name!r} is neither a ServerArgs field (lower case) "
                                     "nor an environment variable (upper case)")
                if name in target and target[name] != value:
                    raise ValueError(f"parameter {name!r} is set twice, to {target[name]!r} and {value!r}")
                target[name] = value

        if args.pop("model_path", model_path) != model_path:
            raise ValueError("model_path is given both as an argument and as a parameter, with different values")
        draft_model_path = args.pop("speculative_draft_model_path", draft_model_path)
        host = args.pop("host", host)
        port = args.pop("port", port)
        if args.get("speculative_algorithm") is None:
            draft_model_path = None
            args = {k: v for k, v in args.items() if not k.startswith("speculative_")}
        return cls(model_path=model_path, draft_model_path=draft_model_path, server_args=args, env=env,
                   backend=backend, host=host, port=port)


__all__ = ["LaunchSpec", "TRIAL_ONLY_ENV", "env_value"]
