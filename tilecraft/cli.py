"""The `tilecraft` command: `tilecraft demo`, `tilecraft code EXAMPLE`,
`tilecraft prompt EXAMPLE` (what LLM-guided tuning would send, without sending it),
`tilecraft learn FOLDER` (import recorded landscapes into the tuning database)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tilecraft import demo


def print_example(example: str, examples: str | None, dtype: str | None, prompt: bool) -> int:
    """Print each kernel's generated code (or LLM prompt) for the example's default inputs."""
    path = demo.find_examples(examples) / f"{example.removesuffix('.py')}.py"
    if not path.is_file():
        print(f"tilecraft: no example {path}", file=sys.stderr)
        return 2
    module = demo.load_example(path)
    for name, kernel in demo.example_kernels(module):
        args = module.inputs(dtype=demo.DTYPES[dtype]) if dtype else module.inputs()
        bound = kernel.bind(args)
        print(f"# ===== {path.stem}.{name}: {bound.default_config}")
        if prompt:
            from tilecraft.autotune.llm import SYSTEM, render_prompt

            print(SYSTEM, render_prompt(bound), sep="\n\n")
        else:
            print(bound.to_triton_code())
    return 0


def learn(folder: str) -> int:
    """Import landscapes into the default tuning database: later tuning learns from them."""
    from tilecraft.autotune.db import TuningDB, default_db_path
    from tilecraft.autotune.landscape import import_landscapes

    with TuningDB(default_db_path()) as db:
        count = import_landscapes(db, folder)
        print(f"tilecraft: {count} trials imported into {db.path}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="tilecraft", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("demo", help="run, check and time every example kernel")
    code = sub.add_parser("code", help="print the generated Triton code of an example")
    code.add_argument("example", help="an example's name, e.g. softmax")
    prompt = sub.add_parser("prompt", help="print what LLM-guided tuning would send a model")
    prompt.add_argument("example", help="an example's name, e.g. softmax")
    learn = sub.add_parser("learn", help="import recorded landscapes into the tuning database")
    learn.add_argument("folder", help="a folder of *.jsonl.gz landscapes")
    for command in (run, code, prompt):
        command.add_argument("--examples", help="the examples folder (default: ./examples)")
        command.add_argument("--dtype", choices=sorted(demo.DTYPES), help="the inputs' dtype")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tilecraft` console script."""
    args = parser().parse_args(argv)
    if args.command == "demo":
        return demo.run_demo(args.examples, args.dtype)
    if args.command == "learn":
        return learn(args.folder)
    return print_example(args.example, args.examples, args.dtype, args.command == "prompt")


if __name__ == "__main__":
    sys.exit(main())
