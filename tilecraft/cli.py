"""The `tilecraft` command: `tilecraft demo`, `tilecraft code EXAMPLE`,
`tilecraft prompt EXAMPLE` (what LLM-guided tuning would send, without sending it),
`tilecraft learn FOLDER` (import recorded landscapes into the tuning database), and
whole-model tuning: `record`, `tune`, `export`, `import`, `merge-db` (see cli_manifest),
`tilecraft bench` (regression tracking, see cli_bench), `tilecraft report` (pictures of
tuning runs and benchmark history, see cli_report) and `tilecraft video` (a video through
the vision kernels, see cli_video)."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tilecraft import cli_bench, cli_manifest, cli_report, cli_video, demo
from tilecraft.exc import ReportError, TilecraftError


class CommandError(Exception):
    """A mistake in the command line: printed as one line, exit status 2."""


def version() -> str:
    """The installed tilecraft's version (a source checkout that is not installed has none)."""
    try:
        return importlib.metadata.version("tilecraft")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def example_path(example: str, examples: str | None) -> Path:
    """The file of the example named `example`; a CommandError lists the names there are."""
    folder = demo.find_examples(examples)
    path = folder / f"{example.removesuffix('.py')}.py"
    if not path.is_file():
        names = ", ".join(p.stem for p in demo.example_files(folder))
        raise CommandError(f"no example {example!r} in {folder}; the examples are: {names}")
    return path


def print_example(example: str, examples: str | None, dtype: str | None, prompt: bool) -> int:
    """Print each kernel's generated code (or LLM prompt) for the example's default inputs."""
    path = example_path(example, examples)
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

    if not Path(folder).is_dir():
        raise CommandError(f"no folder {folder}")
    if not any(Path(folder).glob("*.jsonl.gz")):
        raise CommandError(f"no landscapes (*.jsonl.gz) in {folder}")
    with TuningDB(default_db_path()) as db:
        count = import_landscapes(db, folder)
        print(f"tilecraft: {count} trials imported into {db.path}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="tilecraft", description=__doc__)
    p.add_argument("--version", action="version", version=f"tilecraft {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("demo", help="run, check and time every example kernel")
    run.add_argument(
        "--video",
        nargs="?",
        const="",
        metavar="CLIP",
        help="instead, a video through the vision kernels (a generated clip if none given)",
    )
    code = sub.add_parser("code", help="print the generated Triton code of an example")
    code.add_argument("example", help="an example's name, e.g. softmax")
    prompt = sub.add_parser("prompt", help="print what LLM-guided tuning would send a model")
    prompt.add_argument("example", help="an example's name, e.g. softmax")
    learn = sub.add_parser("learn", help="import recorded landscapes into the tuning database")
    learn.add_argument("folder", help="a folder of *.jsonl.gz landscapes")
    cli_manifest.add_commands(sub)
    cli_bench.add_command(sub)
    cli_video.add_command(sub)
    cli_report.add_command(sub)
    for command in (run, code, prompt):
        command.add_argument(
            "--examples", help="a folder of examples (default: those shipped with tilecraft)"
        )
        command.add_argument("--dtype", choices=sorted(demo.DTYPES), help="the inputs' dtype")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tilecraft` console script."""
    args = parser().parse_args(argv)
    try:
        if args.command == "demo" and args.video is not None:
            return demo.run_video_demo(args.video or None)
        if args.command == "demo":
            return demo.run_demo(args.examples, args.dtype)
        if args.command == "learn":
            return learn(args.folder)
        if args.command in cli_manifest.COMMANDS:
            return cli_manifest.run(args)
        if args.command == "bench":
            return cli_bench.run(args)
        if args.command == "video":
            return cli_video.run(args)
        if args.command == "report":
            return cli_report.run(args)
        return print_example(args.example, args.examples, args.dtype, args.command == "prompt")
    except (CommandError, FileNotFoundError, ReportError) as e:
        print(f"tilecraft: {e}", file=sys.stderr)
        return 2
    except TilecraftError as e:  # a video that cannot be read or written, ...
        print(f"tilecraft: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader left (`tilecraft code softmax | head`): stop quietly, as Python's docs
        # advise, pointing stdout at devnull so that flushing it at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
