"""The add-on registers and unregisters cleanly, twice in a row."""
import bpy

import snowfall

OPERATORS = ("SNOWFALL_OT_set_terrain", "SNOWFALL_OT_bake", "SNOWFALL_OT_resume",
             "SNOWFALL_OT_free", "SNOWFALL_OT_measure")
PANELS = ("PHYSICS_PT_snowfall", "VIEW3D_PT_snowfall")


def _registered():
    return {name: hasattr(bpy.types, name) for name in OPERATORS + PANELS}


def test_register_unregister_twice(factory_scene):
    handlers_before = {name: len(getattr(bpy.app.handlers, name))
                       for name in ("load_pre", "load_post")}
    assert not any(_registered().values())
    for _ in range(2):
        snowfall.register()
        assert all(_registered().values()), _registered()
        assert hasattr(bpy.types.Scene, "snowfall")
        assert bpy.context.scene.snowfall.flake_count > 0
        assert bpy.ops.snowfall.bake.poll()
        snowfall.unregister()
        assert not any(_registered().values()), _registered()
        assert not hasattr(bpy.types.Scene, "snowfall")
        assert {name: len(getattr(bpy.app.handlers, name))
                for name in ("load_pre", "load_post")} == handlers_before


def test_panels_draw_without_errors(addon, tools, tmp_path):
    """Both panels draw (settings, estimates, backend) for a scene with a terrain."""
    scene = addon
    tools.small_settings(scene, tmp_path)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    from snowfall.operators.estimates import estimate
    from snowfall.panels.main import draw_snowfall

    guess = estimate(bpy.context)
    assert guess.wind.cell_count > 0 and guess.total_bytes > 0
    assert guess.heightmap.nx == scene.snowfall.heightmap_resolution  # 10 m side is longer

    class Recorder:
        """Collects what the panel draws (a stand-in for a UILayout)."""

        def __init__(self):
            self.labels, self.props = [], []
            self.use_property_split = self.use_property_decorate = False
            self.active = self.enabled = True

        def __getattr__(self, name):
            return lambda *args, **kwargs: self._call(name, args, kwargs)

        def _call(self, name, args, kwargs):
            if name == "label":
                self.labels.append(kwargs.get("text", ""))
            if name == "prop":
                assert hasattr(args[0], args[1]), args[1]
                self.props.append(args[1])
            return self

    layout = Recorder()
    draw_snowfall(layout, bpy.context)
    text = "\n".join(layout.labels)
    assert "Backend: cpu" in text and "Why:" in text
    assert f"Wind {guess.wind.nx} x {guess.wind.ny} x {guess.wind.nz}" in text
    # the porous fences beside the wind and drift settings
    assert {"fence_collection", "fence_porosity", "wind_mixing", "drift_enabled"} <= \
        set(layout.props)


def test_properties_depend_on_neither_operators_nor_panels():
    """The scene's settings are data: operators/ and panels/ import properties/, never the
    other way round."""
    import ast
    from pathlib import Path

    folder = Path(snowfall.__file__).parent / "properties"
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                tops = ({node.module.split(".")[0]} if node.module
                        else {alias.name for alias in node.names})
                assert not tops & {"operators", "panels"}, (path.name, ast.dump(node))


def test_manifest_admits_exactly_the_range_blender_compat_checks():
    import tomllib
    from pathlib import Path

    from snowfall import blender_compat

    manifest = tomllib.loads(
        (Path(snowfall.__file__).parent / "blender_manifest.toml").read_text())

    def version(text):
        return tuple(int(part) for part in text.split("."))

    assert version(manifest["blender_version_min"]) == blender_compat.VERSION_MIN
    assert version(manifest["blender_version_max"]) == blender_compat.VERSION_MAX
    assert blender_compat.unsupported_reason() is None          # this bpy is supported
    assert bpy.app.version[:2] in {version(v) for v in blender_compat.TESTED}


def test_unsupported_blender_is_refused_at_enable_time_with_a_message(factory_scene,
                                                                         monkeypatch):
    """register() on a Blender outside the range raises UnsupportedBlenderError naming the
    supported releases and this one, and registers nothing."""
    import pytest

    from snowfall import blender_compat

    for old_or_new in ((4, 1, 1), (5, 3, 0), (3, 6, 5)):
        reason = blender_compat.unsupported_reason(old_or_new)
        assert "4.2 to 5.2" in reason and ".".join(map(str, old_or_new)) in reason
    monkeypatch.setattr(blender_compat, "unsupported_reason",
                        lambda version=None: "Snowfall supports Blender 4.2 to 5.2; this is 9.9")
    with pytest.raises(blender_compat.UnsupportedBlenderError, match="4.2 to 5.2"):
        snowfall.register()
    assert not any(_registered().values()) and not hasattr(bpy.types.Scene, "snowfall")
