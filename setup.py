"""Packaging beyond what pyproject.toml can say: the examples in `examples/` ship inside the
package as `tilecraft.examples`, so the CLI finds them after a plain `pip install`."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["tilecraft", "tilecraft.*"]), "tilecraft.examples"],
    package_dir={"tilecraft.examples": "examples"},
)
