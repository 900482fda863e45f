"""``python -m bufkern info``: the loaded library, its build and its devices.

The Python counterpart of the C tool's ``bufkern info``, so an installation can
be checked without the tool: it prints the library's version, the path it was
loaded from, its build facts (backends, BLAS, OpenMP, build type) and the CUDA
devices it sees. Exit status: 0 success, 1 the library cannot be loaded, 2 a
usage error.
"""

from __future__ import annotations

import sys

USAGE = """usage: python -m bufkern info

  info    the C library's version, the path it was loaded from, its build
          (backends, BLAS, OpenMP, build type) and the CUDA devices it sees

The library is the package's own copy unless BUFKERN_LIBRARY names another.
"""


def info(out=sys.stdout) -> int:
    """Print the library's facts to ``out``; 0 on success, 1 when it cannot load."""
    import bufkern

    try:
        path = bufkern.library_path()
    except bufkern.LibraryNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"bufkern {bufkern.version()}", file=out)
    print(f"library: {path}", file=out)
    for key, value in bufkern.build_info().items():
        print(f"{key}: {value}", file=out)
    count = bufkern.cuda_device_count()
    print(f"cuda devices: {count}", file=out)
    for index in range(count):
        try:
            bufkern.Context(f"cuda:{index}")
        except bufkern.Error as exc:
            print(f"  cuda:{index} unavailable: {exc}", file=out)
        else:
            print(f"  cuda:{index} available", file=out)
    print(f"default device: {'cuda:0' if count > 0 else 'cpu'}", file=out)
    return 0


def main(argv: list[str]) -> int:
    if argv in (["--help"], ["-h"], ["help"]):
        print(USAGE, end="")
        return 0
    if argv == ["info"]:
        return info()
    problem = f"unknown command {argv[0]}" if argv else "no command given"
    print(f"python -m bufkern: {problem}\n\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
