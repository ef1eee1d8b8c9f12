"""SGLang's ``launch_server`` command line: parse, resolve, and render.

Every launch command autotune builds or exports goes through :func:`parse_server_args`. Where
SGLang is importable it is checked by SGLang's own argparse parser (``ServerArgs.add_cli_args``);
elsewhere by a built-in twin (:mod:`autotune.sglang._parser_twin`) that accepts and rejects the same
command lines for the flags autotune uses. The parsed arguments are then resolved by SGLang's
speculative-decoding rules (:mod:`autotune.sglang.speculative`). Rendering goes the other way:
field names to flags, an argv or a ``--config`` YAML.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import AutotuneError, LaunchArgsError
from autotune.sglang import _parser_twin as builtin
from autotune.sglang import flags, parser_tables
from autotune.sglang.speculative import resolve_speculative

# ------------------------------------------------------------------------------------------
# SGLang availability and its real parser.
# ------------------------------------------------------------------------------------------


def sglang_available() -> bool:
    """Whether ``sglang.srt.server_args`` imports here (about 2 s the first time, then cached)."""
    return flags.sglang_importable()


def sglang_version() -> str | None:
    """The installed SGLang version, or None without SGLang."""
    if not sglang_available():
        return None
    import sglang

    return getattr(sglang, "__version__", None)


def real_parser() -> argparse.ArgumentParser:
    """SGLang's own parser, built once (it raises instead of exiting).

    Raises:
        AutotuneError: When SGLang is not importable.
    """
    if not sglang_available():
        raise AutotuneError("SGLang is not importable here; install sglang to use its parser")
    return flags.installed_parser()


def _flag_set(use_sglang: bool | None) -> flags.FlagSet:
    if use_sglang is None:
        return flags.active_flags()
    if use_sglang:
        real_parser()  # the clear error without SGLang
        return flags.installed_flags()
    return flags.builtin_flags()


# ------------------------------------------------------------------------------------------
# Parsing.
# ------------------------------------------------------------------------------------------


def parse_server_args(argv: list[str], *, use_sglang: bool | None = None,
                      model_arch: str | None = None) -> dict[str, Any]:
    """Parse and resolve a ``python -m sglang.launch_server`` command line.

    Args:
        argv: The arguments after the module name.
        use_sglang: True forces the installed SGLang's parser, False the built-in 0.5.23 twin;
            None uses :func:`autotune.sglang.flags.active_flags` (SGLang's when importable).
        model_arch: The target's HF architecture (``LlamaForCausalLM``), which decides the
            auto-picked speculative values; None infers it from the model path.

    Returns:
        Field name -> value: every field argparse produced (the built-in parser leaves out flags
        it does not cover unless given), after the speculative rules of
        :func:`~autotune.sglang.speculative.resolve_speculative`.

    Raises:
        LaunchArgsError: With argparse's own message for a bad flag or value, or a rule's message.
        AutotuneError: ``use_sglang=True`` without SGLang.
    """
    argv = [str(a) for a in argv]
    flag_set = _flag_set(use_sglang)
    parser = flag_set.parser
    merged = _merge_config(argv, flag_set)
    try:
        namespace = parser.parse_args(merged)
    except builtin.ParserExit as exc:
        message = exc.message if exc.status else "--help asks for the help text; it is not a launch option"
        raise LaunchArgsError(message, argv=argv) from None
    except SystemExit as exc:  # an action that exits by itself; never seen, but never fatal
        raise LaunchArgsError(f"SGLang's parser exited with status {exc.code}", argv=argv) from None
    except Exception as exc:  # a type or action callable that raises past argparse's own handling
        raise LaunchArgsError(f"{type(exc).__name__}: {exc}", argv=argv) from None
    args = vars(namespace)
    args.pop("config", None)
    resolved, _notes = resolve_speculative(args, model_arch=model_arch, argv=argv)
    return resolved


def _merge_config(argv: list[str], flag_set: flags.FlagSet) -> list[str]:
    """Splice a ``--config FILE`` YAML into argv the way ``prepare_server_args`` does.

    SGLang merges only for the exact token ``--config`` (``--config=f`` is parsed and ignored), puts
    the file's flags first so the command line wins, and raises ValueError for a bad file.
    """
    if "--config" not in argv:
        return argv
    try:
        if _is_installed(flag_set):
            return parser_tables.config_merger_class()(flag_set.parser).merge_config_with_args(argv)
        return _builtin_merge_config(argv, flag_set)
    except Exception as exc:  # ValueError, OSError, yaml.YAMLError: all mean a bad --config
        raise LaunchArgsError(str(exc), argv=argv) from None


def _is_installed(flag_set: flags.FlagSet) -> bool:
    # The installed flag set exists only once installed_flags() has built it (it is cached), so a
    # process on a flag table or the built-in twin finds out without importing SGLang (seconds).
    return flags.installed_flags.cache_info().currsize > 0 and flag_set is flags.installed_flags()


def _builtin_merge_config(argv: list[str], flag_set: flags.FlagSet) -> list[str]:
    indices = [i for i, a in enumerate(argv) if a == "--config"]
    if len(indices) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    index = indices[0]
    if index == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = Path(argv[index + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise ValueError(f"Config file not found: {argv[index + 1]}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true, unsupported = flag_set.config_keys
    config_args: list[str] = []
    for key, value in data.items():
        key = str(key)
        norm = key.replace("-", "_")
        if norm in unsupported:
            raise ValueError(f"Unsupported config option '{norm}' with action '{unsupported[norm]}'")
        if isinstance(value, bool):
            if norm in store_true:
                config_args += [f"--{key}"] if value else []
            else:
                config_args += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            config_args += [f"--{key}", *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            config_args += [f"--{key}", json.dumps(value)]
        else:
            config_args += [f"--{key}", str(value)]
    return config_args + argv[:index] + argv[index + 2:]


# ------------------------------------------------------------------------------------------
# Rendering: field names -> flags, argv and --config YAML.
# ------------------------------------------------------------------------------------------


def to_cli_flag(name: str, *, flag_set: flags.FlagSet | None = None) -> str:
    """The canonical flag of a ServerArgs field: ``speculative_num_steps`` -> ``--speculative-num-steps``.

    Names are resolved by :meth:`autotune.sglang.flags.FlagSet.lookup` under the SGLang in use
    (``fp8_gemm_runner_backend`` -> ``--fp8-gemm-backend``; a deprecated alias -> its replacement);
    unknown names get dashes for underscores.
    """
    ref = (flag_set or flags.active_flags()).lookup(name)
    return ref.flag if ref is not None else "--" + name.replace("_", "-")


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def args_to_argv(mapping: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                 flag_set: flags.FlagSet | None = None) -> list[str]:
    """Render field values as SGLang flags, in the mapping's order.

    None is left out. A switch (store_true) is the bare flag when True and left out when False
    (``--no-x`` for SGLang's ``--x/--no-x`` pairs). A list gives the flag then its items; a dict is
    passed as JSON. Flags are the ones of the SGLang in use (:func:`to_cli_flag`).

    Args:
        mapping: Field name (underscore form) -> value.
        flag_set: The SGLang flags to render for; the active ones if None.

    Returns:
        The argv fragment.
    """
    flag_set = flag_set or flags.active_flags()
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    argv: list[str] = []
    for name, value in items:
        if value is None:
            continue
        ref = flag_set.lookup(name)
        flag = ref.flag if ref is not None else "--" + name.replace("_", "-")
        if ref is not None and ref.boolean_pair:
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, bool) and (ref is None or ref.switch):
            if value:
                argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if value:
                argv += [flag, *(_format_value(v) for v in value)]
        else:
            argv += [flag, _format_value(value)]
    return argv


def config_and_rest(mapping: Mapping[str, Any], *,
                    flag_set: flags.FlagSet | None = None) -> tuple[dict[str, Any], list[str]]:
    """Field values split into an SGLang ``--config`` mapping and the flags that must stay on the
    command line beside ``--config FILE``.

    SGLang's loader turns each key ``k`` into ``--k`` verbatim, so keys are the flags without their
    dashes (``speculative-num-steps``), not field names. Store-true switches appear only when True.
    The loader of the SGLang in use refuses some fields (``--x/--no-x`` pairs, deprecated switches,
    LoRA paths; in 0.5.17 also any field a deprecated alias shares, such as
    ``cuda_graph_max_bs_decode``): those come back as argv, which ``launch_server`` merges with the
    file (``--config FILE --flag value``).

    Args:
        mapping: Field name -> value.
        flag_set: The SGLang flags to write for; the active ones if None.

    Returns:
        (YAML-ready mapping in the input's order, argv of the refused fields in the input's order).
    """
    flag_set = flag_set or flags.active_flags()
    store_true, _ = flag_set.config_keys
    out: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for name, value in mapping.items():
        if value is None:
            continue
        flag = to_cli_flag(name, flag_set=flag_set)
        key = flag[2:].replace("-", "_")
        if _refused(name, flag_set=flag_set) is not None:
            rest[name] = value
            continue
        if (key in store_true or name in store_true) and not value:
            continue
        value = list(value) if isinstance(value, tuple) else value
        out[flag[2:]] = value
    return out, args_to_argv(rest, flag_set=flag_set)


def args_to_config(mapping: Mapping[str, Any], *, flag_set: flags.FlagSet | None = None) -> dict[str, Any]:
    """Field values as the mapping of an SGLang ``--config`` YAML file, all of them in the file.

    Args:
        mapping: Field name -> value.
        flag_set: The SGLang flags to write for; the active ones if None.

    Returns:
        YAML-ready mapping, in the input's order (see :func:`config_and_rest`).

    Raises:
        LaunchArgsError: For a field the loader of the SGLang in use refuses; use
            :func:`config_and_rest` to put such fields on the command line instead.
    """
    flag_set = flag_set or flags.active_flags()
    for name, value in mapping.items():
        refused = None if value is None else _refused(name, flag_set=flag_set)
        if refused is not None:
            raise LaunchArgsError(f"{to_cli_flag(name, flag_set=flag_set)} cannot be written to an SGLang "
                                  f"--config file for {flag_set.describe()} (its loader rejects {refused} "
                                  "flags); pass it on the command line")
    return config_and_rest(mapping, flag_set=flag_set)[0]


def _refused(name: str, *, flag_set: flags.FlagSet) -> str | None:
    """The action class for which SGLang's ``--config`` loader refuses field ``name``, or None."""
    _, unsupported = flag_set.config_keys
    key = to_cli_flag(name, flag_set=flag_set)[2:].replace("-", "_")
    return unsupported.get(key) or unsupported.get(name)


def canonical_args(server_args: Mapping[str, Any], *,
                   flag_set: flags.FlagSet | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Server args keyed by the names the SGLang in use knows them by.

    Args:
        server_args: Name -> value; names may be fields, flag spellings or deprecated aliases.
        flag_set: The SGLang flags; the active ones if None.

    Returns:
        (canonical name -> value in the input's order, given name -> canonical name).

    Raises:
        LaunchArgsError: An ambiguous or unknown name (with the candidates and SGLang version),
            or two names of one flag given different values.
    """
    flag_set = flag_set or flags.active_flags()
    out: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for name, value in server_args.items():
        key = flag_set.resolve(name).key
        if key in out and out[key] != value:
            given = next(n for n, k in keys.items() if k == key)
            raise LaunchArgsError(f"server args {given!r} and {name!r} are the same flag "
                                  f"({to_cli_flag(key, flag_set=flag_set)} in {flag_set.describe()}) "
                                  f"with different values {out[key]!r} and {value!r}")
        out[key] = value
        keys[name] = key
    return out, keys


def default_value(name: str) -> Any:
    """SGLang's default for a field (before resolution).

    Raises:
        KeyError: For a field neither the built-in table covers nor an installed SGLang knows.
    """
    if name in builtin.covered():
        return builtin.default_of(name)
    if sglang_available():
        for action in real_parser()._actions:
            if action.dest == name:
                return action.default
    raise KeyError(name)


def is_server_flag(name: str) -> bool:
    """Whether the SGLang in use has a flag for ``name`` (exactly, or as a field)."""
    return flags.active_flags().lookup(name) is not None
