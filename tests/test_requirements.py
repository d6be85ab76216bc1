"""requirements.txt installs on every platform the README names.

Triton has wheels for Linux x86-64 and aarch64 only and Liger-Kernel needs it, so both carry
environment markers; everything else must install on macOS (Apple silicon) and Windows too.
``pip install --dry-run --platform ...`` cannot prove this: pip evaluates markers against the
machine it runs on, not the target platform. So the markers are evaluated here for each
target, with ``packaging``, the library pip itself uses.
"""

from pathlib import Path

import pytest
from packaging.requirements import Requirement

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements.txt"
LINUX_ONLY = {"triton", "liger-kernel"}

PLATFORMS = {
    "linux-x86_64": {"sys_platform": "linux", "platform_machine": "x86_64",
                     "platform_system": "Linux", "os_name": "posix"},
    "linux-aarch64": {"sys_platform": "linux", "platform_machine": "aarch64",
                      "platform_system": "Linux", "os_name": "posix"},
    "macos-arm64": {"sys_platform": "darwin", "platform_machine": "arm64",
                    "platform_system": "Darwin", "os_name": "posix"},
    "windows-amd64": {"sys_platform": "win32", "platform_machine": "AMD64",
                      "platform_system": "Windows", "os_name": "nt"},
}


def requirements() -> list[Requirement]:
    lines = [line.split(" #")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    return [Requirement(line) for line in lines if line and not line.startswith(("#", "-"))]


def installed_on(platform: str) -> set[str]:
    env = {"python_version": "3.11", "python_full_version": "3.11.7",
           "implementation_name": "cpython", "platform_python_implementation": "CPython",
           **PLATFORMS[platform]}
    return {r.name.lower() for r in requirements()
            if r.marker is None or r.marker.evaluate(env)}


@pytest.mark.parametrize("platform", ["linux-x86_64", "linux-aarch64"])
def test_linux_gets_everything(platform):
    assert installed_on(platform) == {r.name.lower() for r in requirements()}


@pytest.mark.parametrize("platform", ["macos-arm64", "windows-amd64"])
def test_other_platforms_get_everything_but_the_linux_only_packages(platform):
    every = {r.name.lower() for r in requirements()}
    assert LINUX_ONLY <= every
    assert installed_on(platform) == every - LINUX_ONLY


def test_only_the_linux_only_packages_carry_a_platform_marker():
    marked = {r.name.lower() for r in requirements() if r.marker is not None}
    assert marked == LINUX_ONLY


def test_torch_is_pinned_to_the_cpu_build_version():
    torch = [r for r in requirements() if r.name == "torch"]
    assert len(torch) == 1 and str(torch[0].specifier) == "==2.13.0"
