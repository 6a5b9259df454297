"""Blender's command line for farm scripts, on the bpy module (pip's Blender as a Python
module, which has no command line of its own):

    python bpy_blender.py -b scene.blend --python-exit-code 1 --python snowfall_bake.py -- ARGS

does what ``blender -b scene.blend --python-exit-code 1 --python snowfall_bake.py -- ARGS``
does: opens the file (a file Blender cannot open is reported and the script runs in the
empty file, as Blender does), runs each ``--python``/``-P`` script or ``--python-expr`` in
order with ``sys.argv`` holding the whole command line (a script reads its own arguments
after ``--``), ends with the status of a ``sys.exit`` in a script, with the
``--python-exit-code`` status when a script raises, and with 0 otherwise.

Used by the tests and by farms whose workers run the bpy module instead of a Blender binary
(docs/farm.md). Only the arguments above and ``-y``, ``--factory-startup``, ``-noaudio``
(no effect here) are understood; anything else is refused.
"""
import os
import runpy
import sys
import traceback

IGNORED = ("-b", "--background", "-y", "--enable-autoexec", "--factory-startup", "-noaudio")


def _exit(status: int) -> None:
    """End the process at once (the 4.2/4.5 bpy module crashes in its exit handlers once
    an add-on has registered; a Blender binary does not return here either)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main(argv: list) -> None:
    import bpy

    exit_code_on_error = 0
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            break
        if arg in IGNORED:
            index += 1
            continue
        if arg in ("--python-exit-code", "--python", "-P", "--python-expr"):
            if index + 1 >= len(argv):
                print(f"Error: you must specify a value after '{arg}'.", file=sys.stderr)
                _exit(1)
            value = argv[index + 1]
            index += 2
            if arg == "--python-exit-code":
                try:
                    exit_code_on_error = int(value)
                except ValueError:
                    print(f"Error: --python-exit-code needs a number, not '{value}'",
                          file=sys.stderr)
                    _exit(1)
                continue
            sys.argv = ["blender", *argv]
            try:
                if arg == "--python-expr":
                    exec(compile(value, "<string>", "exec"), {"__name__": "__main__"})
                else:
                    runpy.run_path(os.path.abspath(value), run_name="__main__")
            except SystemExit as error:        # Blender exits with a script's sys.exit status
                _exit(_status(error.code))
            except BaseException:
                traceback.print_exc()
                if exit_code_on_error:
                    print(f"\nError: script failed, file: '{value}', exiting.", flush=True)
                    _exit(exit_code_on_error)
            continue
        if arg.startswith("-"):
            print(f"bpy_blender.py: '{arg}' is not supported here (only -b, FILE, "
                  "--python-exit-code, --python, --python-expr and --)", file=sys.stderr)
            _exit(2)
        try:                                   # the .blend to open
            bpy.ops.wm.open_mainfile(filepath=os.path.abspath(arg))
        except RuntimeError as error:
            print(f"Error: {str(error).strip()}", file=sys.stderr, flush=True)
        index += 1
    _exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
