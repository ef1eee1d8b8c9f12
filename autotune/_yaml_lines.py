"""YAML loading that remembers where every key and value came from.

Search-space errors must point at a line. PyYAML's constructed objects lose their marks, so this
loader builds :class:`LineDict` and :class:`LineList` containers that keep the 1-based line of
each key, value and item. Everything else is plain ``yaml.SafeLoader`` behaviour, with two
additions that matter for user files: duplicate keys, recursive aliases and aliases that expand
the document past :data:`MAX_EXPANDED_CHARS` are errors instead of being silently accepted.
"""

from __future__ import annotations

from typing import Any

import yaml

from autotune.errors import ConfigError

__all__ = ["MAX_EXPANDED_CHARS", "LineDict", "LineList", "key_line_of", "line_of", "load_yaml_text"]


class LineDict(dict):
    """A dict that knows the line of its own start, of each key and of each value."""

    line: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: dict[Any, int] = {}
        self.value_lines: dict[Any, int] = {}


class LineList(list):
    """A list that knows the line of its own start and of each item."""

    line: int | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_lines: list[int] = []


def line_of(container: Any, key: Any = None) -> int | None:
    """Best line for ``container[key]`` (or the container itself when key is None).

    Args:
        container: A :class:`LineDict`, :class:`LineList` or any plain object.
        key: A mapping key or list index.

    Returns:
        The 1-based line, or None when the object came from a plain dict (``from_dict``).
    """
    if key is None:
        return getattr(container, "line", None)
    if isinstance(container, LineDict):
        return container.value_lines.get(key, container.key_lines.get(key, container.line))
    if isinstance(container, LineList) and isinstance(key, int):
        if 0 <= key < len(container.item_lines):
            return container.item_lines[key]
        return container.line
    return getattr(container, "line", None)


def key_line_of(container: Any, key: Any) -> int | None:
    """Line of a mapping key itself (for 'unknown key' errors), else of the container."""
    if isinstance(container, LineDict):
        return container.key_lines.get(key, container.line)
    return getattr(container, "line", None)


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose maps and sequences are LineDict and LineList."""


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    # flatten_mapping resolves YAML merge keys (<<) the same way SafeLoader does.
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = _line(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                "found an unhashable key", key_node.start_mark) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r} (first at line {result.key_lines[key]})",
                key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = _line(key_node)
        result.value_lines[key] = _line(value_node)
    return result


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = _line(node)
    result.item_lines = [_line(child) for child in node.value]
    return result


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def _check_acyclic(root: yaml.Node) -> None:
    """Reject recursive aliases (``&a [*a]``), which would make the space infinite."""
    on_path: set[int] = set()
    done: set[int] = set()
    # Iterative DFS: deep documents must not hit Python's recursion limit.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if id(node) in done:
            continue
        if id(node) in on_path:
            raise ConfigError("recursive YAML alias; a value may not contain itself",
                              line=_line(node))
        on_path.add(id(node))
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                stack.append((key_node, False))
                stack.append((value_node, False))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, False) for child in node.value)


#: The most characters a document may hold once its aliases are expanded: a 1.4 KB file of nested
#: aliases (a "billion laughs") expands to millions, which would be built, checked and printed.
MAX_EXPANDED_CHARS = 1_000_000


def _check_expansion(root: yaml.Node) -> None:
    """Reject a document whose aliases expand it past :data:`MAX_EXPANDED_CHARS` (it is acyclic)."""
    size: dict[int, int] = {}
    # Post-order over the node graph, each node once: a node's size is its scalar's length, or the
    # sum of its children's, so a shared (aliased) node counts once per use.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if id(node) in size:
            continue
        if isinstance(node, yaml.ScalarNode):
            size[id(node)] = len(str(node.value)) + 1
            continue
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else list(node.value))
        if leaving:
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            if size[id(node)] > MAX_EXPANDED_CHARS:
                raise ConfigError(f"YAML aliases expand this value to more than {MAX_EXPANDED_CHARS:,} "
                                  "characters; write the values out, or use fewer nested aliases",
                                  line=_line(node))
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children)


def load_yaml_text(text: str, *, file: str | None = None) -> Any:
    """Parse one YAML document, keeping line numbers.

    Args:
        text: The YAML source.
        file: Where it came from, for error messages.

    Returns:
        The document, with mappings as :class:`LineDict` and sequences as :class:`LineList`.
        An empty document gives None.

    Raises:
        ConfigError: On malformed YAML (with the parser's line and column), several documents,
            duplicate keys, unhashable keys, unsupported tags, recursive aliases or aliases that
            expand past :data:`MAX_EXPANDED_CHARS`.
    """
    loader = None
    try:
        # The constructor already scans for unprintable characters.
        loader = _LineLoader(text)
        root = loader.get_single_node()
        if root is None:
            return None
        try:
            _check_acyclic(root)
            _check_expansion(root)
        except ConfigError as exc:
            raise ConfigError(exc.message, file=file, line=exc.line) from None
        return loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        column = f", column {mark.column + 1}" if mark is not None else ""
        detail = " ".join(part for part in (exc.context, exc.problem) if part)
        start = exc.context_mark
        if start is not None and mark is not None and start.line != mark.line:
            detail += f" (the construct starts at line {start.line + 1})"
        raise ConfigError(f"malformed YAML{column}: {detail or exc}", file=file,
                          line=line) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(f"malformed YAML: character U+{exc.character:04X} is not allowed",
                          file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML: {exc}", file=file) from None
    except RecursionError:
        raise ConfigError("YAML document nested too deeply", file=file) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # PyYAML's scalar constructors raise these for values like the date 2024-13-45.
        raise ConfigError(f"malformed YAML value: {exc}", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()
