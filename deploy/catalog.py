"""What ``shiftwatch operators`` and ``shiftwatch sources`` print: the operators with their
parameters (one operator: each parameter's meaning, from the docstrings) and the sources."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shiftwatch.deploy.errors import UserError, user_input

__all__ = ["cmd_operators", "cmd_sources"]


def cmd_operators(args: argparse.Namespace) -> int:
    from shiftwatch.operators import list_operators

    if getattr(args, "name", None):
        return _describe_operator(args.name, args.json)
    infos = list_operators()
    if args.json:
        print(json.dumps([{"name": i.name, "summary": i.summary, "input": i.input_kind,
                           "params": {k: _jsonable(v) for k, v in i.params.items()}}
                          for i in infos], indent=2))
        return 0
    for info in infos:
        params = ", ".join(f"{k}={v!r}" if v != "required" else f"{k} (required)"
                           for k, v in info.params.items())
        print(f"{info.name:<22} {info.summary}")
        if info.input_kind:
            print(f"{'':<22} input: {info.input_kind}")
        print(f"{'':<22} params: {params or '(none)'}")
    print("\nEvery operator also takes keep_input=true: its outputs then carry the input "
          "record's fields too.")
    return 0

def _describe_operator(name: str, as_json: bool) -> int:
    """``shiftwatch operators NAME``: each parameter with its default and its meaning (the
    operator's docstring, and its detector's)."""
    import textwrap

    from shiftwatch.operators import list_operators
    from shiftwatch.operators.registry import param_help

    info = next((i for i in list_operators() if i.name == name), None)
    if info is None:
        from difflib import get_close_matches

        names = [i.name for i in list_operators()]
        near = get_close_matches(name, names, n=1)
        raise UserError(f"no operator {name!r}" + (f"; did you mean {near[0]}?" if near else
                                                   "") + " (`shiftwatch operators` lists them)")
    with user_input():
        meaning = param_help(name)
    if as_json:
        print(json.dumps({"name": info.name, "summary": info.summary, "input": info.input_kind,
                          "params": {k: {"default": _jsonable(v), "help": meaning.get(k)}
                                     for k, v in info.params.items()}}, indent=2))
        return 0
    print(f"{info.name}: {info.summary}")
    if info.input_kind:
        print(f"input: {info.input_kind}")
    print("parameters (--param NAME=VALUE):")
    for k, v in info.params.items():
        print(f"  {k} (required)" if v == "required" else f"  {k} = {v!r}")
        text = meaning.get(k) or "(not described in the docstring)"
        print(textwrap.fill(text, width=96, initial_indent="      ",
                            subsequent_indent="      "))
    print("  keep_input = False\n      Every operator's: its outputs also carry the input "
          "record's fields.")
    return 0

def _jsonable(v: Any) -> Any:
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return repr(v)

def cmd_sources(args: argparse.Namespace) -> int:
    from shiftwatch.streams import list_sources

    for line in list_sources():
        print(line)
    return 0
