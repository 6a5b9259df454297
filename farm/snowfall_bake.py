"""Bake a .blend's snowfall on a farm, through Blender itself (docs/farm.md):

    blender -b scene.blend --python-exit-code 1 --python snowfall_bake.py -- \\
        [--scene NAME] [--frame-start N] [--frame-end M] [--cache-folder DIR] \\
        [--absolute-paths] [--backend auto|gpu|cpu|numpy] [--resume-if-any | --resume] \\
        [--output baked.blend] [--camera-only [--camera-margin 0.1]]

The Snowfall add-on must be installed in that Blender (enabled, or it is enabled for this
run only; a pip-installed ``snowfall`` package serves on the bpy module). Every argument
is checked before any work; a bad one is answered with one line naming it, what is wrong
and what to try. One flushed line per baked frame. The file is saved in place (or to
``--output``) whole or not at all. ``--resume-if-any`` continues the bake a killed task
left in the cache folder (frame by frame from its last committed frame) and bakes from the
start when there is none: give it to every farm task so that a retried task resumes.

Exit status: 0 baked and saved, 1 the bake or the save failed (full disk, a save that is
not whole, the add-on missing), 2 a bad argument or setting.
"""
import importlib
import os
import sys

PREFIX = "snowfall-bake"
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


def script_arguments(argv: list) -> list:
    """The arguments after ``--`` (Blender's own come before it)."""
    return argv[argv.index("--") + 1:] if "--" in argv else []


def finish(status: int) -> None:
    """End with ``status``. A failure ends the process at once after flushing, so that the
    status reaches the farm whatever the Blender release does with a script's exit; the
    bpy module always ends this way (its 4.2/4.5 builds crash in their exit handlers once
    an add-on has registered)."""
    import bpy

    sys.stdout.flush()
    sys.stderr.flush()
    if status or not bpy.app.binary_path:
        os._exit(status)


def find_addon():
    """(the add-on's package, how it was found), or (None, why not)."""
    import bpy

    for name in bpy.context.preferences.addons.keys():
        if name == "snowfall" or name.endswith(".snowfall"):
            return importlib.import_module(name), f"the enabled add-on '{name}'"
    try:
        import addon_utils

        for module in addon_utils.modules(refresh=False):
            if module.__name__ == "snowfall" or module.__name__.endswith(".snowfall"):
                addon_utils.enable(module.__name__, default_set=False)
                if hasattr(bpy.types.Scene, "snowfall"):
                    return (importlib.import_module(module.__name__),
                            f"the add-on '{module.__name__}' (enabled for this run)")
                return None, (f"the add-on '{module.__name__}' is installed but could not be "
                              "enabled (see the lines above)")
    except ImportError:
        pass
    try:
        package = importlib.import_module("snowfall")
        importlib.import_module("snowfall.operators.headless")
        return package, f"the snowfall package at {os.path.dirname(package.__file__)}"
    except ImportError:
        pass
    version = ".".join(str(part) for part in bpy.app.version)
    return None, (f"the Snowfall add-on is not installed in this Blender ({version}); install "
                  "the extension on every bake worker (blender --command extension "
                  "install-file --repo user_default --enable snowfall-<version>-<platform>.zip)"
                  ", or pip install the snowfall package where the bpy module runs")


def main(argv: list) -> int:
    import bpy

    args = script_arguments(argv)
    if not bpy.data.filepath:
        print(f"{PREFIX}: error: blend: no .blend file is open (Blender could not read the "
              "one given, or none was given before --python); try blender -b scene.blend "
              "--python snowfall_bake.py -- ...", file=sys.stderr)
        return EXIT_BAD_INPUT
    package, how = find_addon()
    if package is None:
        print(f"{PREFIX}: error: {how}", file=sys.stderr)
        return EXIT_FAILED
    version = ".".join(str(part) for part in bpy.app.version)
    print(f"{PREFIX}: Blender {version}, {how}, file {bpy.data.filepath}", flush=True)
    headless = importlib.import_module(package.__name__ + ".operators.headless")
    return headless.run([bpy.data.filepath, *args], open_file=False,
                        prog="blender -b scene.blend --python snowfall_bake.py --")


if __name__ == "__main__":
    finish(main(sys.argv))
