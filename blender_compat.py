"""Every difference between the Blender releases Snowfall supports, in one place.

Supported: Blender 4.2 LTS, 4.5 LTS, 5.0, 5.1 and 5.2 LTS (the add-on suite runs on each;
see docs/addon.md, "Supported Blender versions"). The rest of the add-on calls the helpers
here instead of testing ``bpy.app.version`` itself. Where the API itself can be probed,
the helpers probe it; version numbers are used only where it cannot.

| what                          | 4.2        | 4.5, 5.0, 5.1     | 5.2                                 |
| ----------------------------- | ---------- | ----------------- | ----------------------------------- |
| Geometry Nodes modifier input | ``mod[id]``| ``mod[id]``       | ``mod.properties.inputs.<id>.value``|
| F-curves of an action         | ``action.fcurves`` | the slot's channel bag (4.4+)   | same                 |
| StringProperty option ``PATH_SUPPORTS_BLEND_RELATIVE`` | absent | present (4.5+) | present |
| new material / world          | no node tree until ``use_nodes`` | 4.5 same; 5.0+ always a tree | same |
| exit of the bpy *module*      | 4.2 crashes, 4.5 hangs in C++ static destructors once Python property callbacks were registered | clean | clean |
| flake cache of a new bake     | Geometry Nodes bake (``FLAKE_CACHE``) | 4.5: same; 5.0+: Zstd point cache | point cache |
| Bake node ``bake_target``     | absent (disk only) | present (4.3+) | present |
| a bake folder is read         | only once the .blend is saved (``BAKE_NEEDS_SAVED_BLEND``) | also unsaved | same |
"""
from __future__ import annotations

import os
import sys

import bpy

#: Oldest supported Blender and the first one not supported (exclusive), as the
#: manifest's blender_version_min / blender_version_max say (a test keeps them equal).
VERSION_MIN = (4, 2, 0)
VERSION_MAX = (5, 3, 0)
#: The releases the add-on suite runs on (tools/test_blender_versions.sh).
TESTED = ("4.2", "4.5", "5.0", "5.1", "5.2")


class UnsupportedBlenderError(RuntimeError):
    """Raised by ``check_version`` (at enable time) on a Blender outside the tested range."""


def unsupported_reason(version: tuple | None = None) -> str | None:
    """Why this Blender (or ``version``) cannot run Snowfall, or None when it can."""
    version = tuple(version if version is not None else bpy.app.version)[:3]
    if VERSION_MIN <= version < VERSION_MAX:
        return None
    found = ".".join(str(part) for part in version)
    return (f"Snowfall supports Blender {_release(VERSION_MIN)} to "
            f"{_release(_previous_release(VERSION_MAX))} (tested on {', '.join(TESTED)}); "
            f"this is Blender {found}. Install Snowfall in a supported Blender, for example "
            f"the current LTS, {TESTED[-1]}.")


def check_version() -> None:
    """UnsupportedBlenderError with a readable message on an unsupported Blender."""
    reason = unsupported_reason()
    if reason is not None:
        raise UnsupportedBlenderError(reason)


def _release(version: tuple) -> str:
    return f"{version[0]}.{version[1]}"


def _previous_release(version: tuple) -> tuple:
    return (version[0], version[1] - 1, 0) if version[1] > 0 else (version[0] - 1, 99, 0)


#: How a new bake stores its flakes. Blender 4.2 to 4.5 read point caches only
#: uncompressed (40 B per flake-frame) or LZO/LZMA (too slow to write from Python), so they
#: get a Geometry Nodes bake of a point cloud (15 B, operators/gn_flakes.py); 5.0 and later
#: read Zstd point caches (about 13 B, operators/particle_output.py). A resumed bake keeps
#: the form it started with (bake.json).
FLAKE_CACHE_GN_BAKE = "gn_bake"
FLAKE_CACHE_PTCACHE = "ptcache"
FLAKE_CACHE = FLAKE_CACHE_GN_BAKE if bpy.app.version < (5, 0, 0) else FLAKE_CACHE_PTCACHE

#: Blender 4.2 reads a Geometry Nodes bake folder only when the .blend has been saved (even
#: a folder given as an absolute path), and a modifier that looked before the first save
#: keeps finding nothing: the flakes of a bake in an unsaved file show once it is saved
#: (operators/gn_flakes.py re-creates the modifier then).
BAKE_NEEDS_SAVED_BLEND = bpy.app.version < (4, 3, 0)


#: Options of a StringProperty holding a file path that may be blend-relative ("//...").
#: ``PATH_SUPPORTS_BLEND_RELATIVE`` exists from 4.5 on; 4.2 accepts "//" paths without it.
PATH_OPTIONS = {"PATH_SUPPORTS_BLEND_RELATIVE"} if bpy.app.version >= (4, 5, 0) else set()


def action_fcurves(anim_data):
    """The F-curves animating the owner of ``anim_data`` (an AnimData), or None.

    4.4+ (layered, slotted actions): the channel bag of the assigned slot; before: the
    action's own ``fcurves``."""
    if anim_data is None or anim_data.action is None:
        return None
    action = anim_data.action
    slot = getattr(anim_data, "action_slot", None)
    if slot is not None:
        from bpy_extras import anim_utils

        bag = anim_utils.action_get_channelbag_for_slot(action, slot)
        return bag.fcurves if bag is not None else None
    return getattr(action, "fcurves", None)


def set_modifier_input(modifier, identifier: str, value) -> None:
    """Set the Geometry Nodes modifier input ``identifier`` (e.g. "Socket_2") to ``value``.

    5.2 stores the inputs as RNA (``modifier.properties.inputs.<identifier>.value``) and
    refuses ID properties on the modifier; earlier releases keep them as ID properties."""
    inputs = getattr(getattr(modifier, "properties", None), "inputs", None)
    if inputs is not None:
        getattr(inputs, identifier).value = value
    else:
        modifier[identifier] = value


def get_modifier_input(modifier, identifier: str):
    """The value of the Geometry Nodes modifier input ``identifier``."""
    inputs = getattr(getattr(modifier, "properties", None), "inputs", None)
    if inputs is not None:
        return getattr(inputs, identifier).value
    return modifier[identifier]


def node_tree(id_block):
    """The shader node tree of a material or world, created (``use_nodes``) where a new one
    has none yet (before 5.0; from 5.0 on they always have one)."""
    if id_block.node_tree is None:
        id_block.use_nodes = True
    return id_block.node_tree


def principled_material(name: str, base_color):
    """A new material ``name`` with its node tree: (material, its Principled BSDF, its
    output node; both None where the default tree lacks them). ``base_color``: RGBA, also
    the viewport colour."""
    material = bpy.data.materials.new(name)
    material.diffuse_color = base_color
    nodes = node_tree(material).nodes
    principled = next((n for n in nodes if n.type == "BSDF_PRINCIPLED"), None)
    output = next((n for n in nodes if n.type == "OUTPUT_MATERIAL"), None)
    if principled is not None:
        principled.inputs["Base Color"].default_value = base_color
    return material, principled, output


def transparent_where(material, principled, output, factor, transparent_at: float):
    """Wire ``material``'s surface as its Principled BSDF mixed with a transparent one by the
    socket ``factor``: fully transparent where ``factor`` is ``transparent_at`` (0 or 1), the
    Principled BSDF at the other end."""
    tree = node_tree(material)
    nodes, links = tree.nodes, tree.links
    transparent = nodes.new("ShaderNodeBsdfTransparent")
    mix = nodes.new("ShaderNodeMixShader")
    links.new(factor, mix.inputs["Fac"])
    first, second = ((transparent, principled) if transparent_at == 0 else
                     (principled, transparent))
    links.new(first.outputs["BSDF"], mix.inputs[1])
    links.new(second.outputs["BSDF"], mix.inputs[2])
    links.new(mix.outputs["Shader"], output.inputs["Surface"])
    return mix


#: The bpy module (no Blender binary) of 4.2 and 4.5 dies at process exit once an add-on
#: has registered property callbacks (poll/update): 4.2 with SIGSEGV, 4.5 hangs, both in
#: C++ static destructors that call into the finalized interpreter. A real Blender is
#: not affected, nor is the module from 5.0 on.
EXIT_CRASHES = bpy.app.version < (5, 0, 0) and not bpy.app.binary_path


def exit_process(status=0):
    """``sys.exit(status)``, except on a bpy module whose exit crashes (``EXIT_CRASHES``):
    there, flush the output and end the process at once with the same status, skipping
    the destructors. For scripts and command lines that run on the bpy module."""
    if not EXIT_CRASHES:
        sys.exit(status)
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def guard_exit(status=lambda: 0) -> None:
    """Where ``EXIT_CRASHES``: at interpreter exit (after the atexit handlers registered
    after this call) end the process with ``status()`` instead of crashing. For long-lived
    hosts such as a test runner, which pass their own exit status."""
    if EXIT_CRASHES:
        import atexit

        atexit.register(lambda: exit_process(status()))
