"""Wind preview in Blender (bpy module): registration is repeatable and leaves nothing
behind, the draw handler goes away on unregister and on file load and is never added in
background mode, Preview Wind fills the overlay's store, Wind to Object builds renderable
objects with a per-point ``speed`` attribute."""
import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from snowfall import properties  # noqa: E402
from snowfall.panels import wind_overlay  # noqa: E402
from snowfall.operators import wind_preview as preview_ops  # noqa: E402
from snowfall.operators.shown_wind import ShownWind  # noqa: E402
from snowfall.snow_addon.grid import WindGrid  # noqa: E402
from snowfall.snow_addon.scenes import gaussian_hill  # noqa: E402

pytestmark = pytest.mark.blender
WindOverlay = wind_overlay.WindOverlay


@pytest.fixture
def registered():
    """The settings, the overlay module and the operators registered (and the scene
    settings too, unless the whole add-on already registered them)."""
    bpy.ops.wm.read_homefile(use_empty=True)
    if hasattr(bpy.types.Scene, "snowfall_wind_preview"):  # the whole add-on is registered
        yield
        return
    own_properties = not hasattr(bpy.types.Scene, "snowfall")
    if own_properties:
        properties.register()
    wind_overlay.register()
    preview_ops.register()
    yield
    preview_ops.unregister()
    wind_overlay.unregister()
    if own_properties:
        properties.unregister()


class Field:
    def __init__(self, grid, velocity):
        nz, ny, nx = grid.shape
        self.grid = grid
        self.u = np.full((nz, ny, nx + 1), velocity[0], np.float32)
        self.v = np.full((nz, ny + 1, nx), velocity[1], np.float32)
        self.w = np.full((nz + 1, ny, nx), velocity[2], np.float32)
        self.pressure = np.zeros((nz, ny, nx), np.float32)
        self.solid = np.zeros((nz, ny, nx), bool)
        self.solid[0] = True  # the ground layer


def uniform_field(velocity=(3.0, 4.0, 0.0)):
    return Field(WindGrid(-8.0, -6.0, -1.0, 1.0, 16, 12, 6), velocity)


def test_register_unregister_twice_leaves_nothing_behind():
    if hasattr(bpy.types.Scene, "snowfall_wind_preview"):
        pytest.skip("the add-on is registered by another fixture; cannot cycle it here")
    had_properties = hasattr(bpy.types.Scene, "snowfall")
    for _ in range(2):
        if not had_properties:
            properties.register()
        wind_overlay.register()
        preview_ops.register()
        assert hasattr(bpy.types.Scene, "snowfall_wind_preview")
        assert wind_overlay._on_load in bpy.app.handlers.load_pre
        assert wind_overlay._on_load in bpy.app.handlers.load_post
        assert hasattr(bpy.types, "SNOWFALL_OT_preview_wind")
        assert hasattr(bpy.types, "VIEW3D_PT_snowfall_wind_preview")
        preview_ops.unregister()
        wind_overlay.unregister()
        if not had_properties:
            properties.unregister()
        assert not hasattr(bpy.types.Scene, "snowfall_wind_preview")
        assert wind_overlay._on_load not in bpy.app.handlers.load_pre
        assert wind_overlay._on_load not in bpy.app.handlers.load_post
        assert not hasattr(bpy.types, "SNOWFALL_OT_preview_wind")
        assert not hasattr(bpy.types, "VIEW3D_PT_snowfall_wind_preview")
        assert not WindOverlay.is_enabled()
        assert ShownWind.viewer is None      # publishing no longer reaches the overlay


def test_no_draw_handler_in_background_mode(registered):
    assert bpy.app.background
    bpy.context.scene.snowfall_wind_preview.show_overlay = True
    ShownWind.publish(uniform_field())
    assert WindOverlay.store.wind_field is not None
    assert not WindOverlay.is_enabled()  # nothing that could call gpu is installed


def test_handler_removed_on_unregister_and_on_file_load(registered, monkeypatch):
    # Pretend Blender can draw: the handler is installed (nothing draws it headless).
    monkeypatch.setattr(WindOverlay, "can_draw", staticmethod(lambda: True))
    bpy.context.scene.snowfall_wind_preview.show_overlay = True
    ShownWind.publish(uniform_field())
    assert WindOverlay.is_enabled()
    bpy.ops.wm.read_homefile(use_empty=True)  # runs load_pre / load_post
    assert not WindOverlay.is_enabled()
    assert WindOverlay.store.wind_field is None  # the old file's wind is gone too
    # switching the overlay on again installs it; unregistering removes it
    bpy.context.scene.snowfall_wind_preview.show_overlay = False
    bpy.context.scene.snowfall_wind_preview.show_overlay = True
    assert WindOverlay.is_enabled()
    wind_overlay.unregister()
    assert not WindOverlay.is_enabled()
    wind_overlay.register()  # for the fixture's teardown


def _speed_of(data, count):
    values = np.empty(count, np.float32)
    data.attributes["speed"].data.foreach_get("value", values)
    return values


def test_wind_to_object_streamlines_carry_speed_per_point(registered):
    ShownWind.publish(uniform_field((3.0, 4.0, 0.0)))
    bpy.context.scene.snowfall_wind_preview.density = 6
    assert bpy.ops.snowfall.wind_to_object(style="STREAMLINES") == {"FINISHED"}
    obj = bpy.context.view_layer.objects.active
    assert obj.type == "CURVES" and len(obj.data.curves) > 0
    count = len(obj.data.points)
    speeds = _speed_of(obj.data, count)
    assert len(obj.data.attributes["speed"].data) == count
    np.testing.assert_allclose(speeds, 5.0, rtol=1e-5)
    # straight lines along the wind, inside the domain, above the ground layer
    positions = np.empty(count * 3, np.float32)
    obj.data.position_data.foreach_get("vector", positions)
    positions = positions.reshape(-1, 3)
    assert np.ptp(positions[:, 2]) < 1e-5 and positions[:, 2].min() > 0.0
    assert obj.active_material is not None and obj.active_material.name.startswith("Snowfall Wind")


def test_wind_to_object_arrows_mesh_carries_speed_per_vertex(registered):
    ShownWind.publish(uniform_field((0.0, 2.0, 0.0)))
    bpy.context.scene.snowfall_wind_preview.density = 4
    assert bpy.ops.snowfall.wind_to_object(style="ARROWS") == {"FINISHED"}
    obj = bpy.context.view_layer.objects.active
    assert obj.type == "MESH"
    mesh = obj.data
    assert len(mesh.vertices) > 0 and len(mesh.vertices) % 13 == 0
    assert len(mesh.attributes["speed"].data) == len(mesh.vertices)
    np.testing.assert_allclose(_speed_of(mesh, len(mesh.vertices)), 2.0, rtol=1e-5)
    assert len(mesh.polygons) == 22 * (len(mesh.vertices) // 13)


def test_wind_to_object_without_wind_reports_an_error(registered):
    WindOverlay.clear()
    with pytest.raises(RuntimeError, match="Preview Wind"):
        bpy.ops.snowfall.wind_to_object()


def _hill_object():
    vertices, triangles = gaussian_hill(size=40.0, height=8.0, sigma=6.0, resolution=17)
    mesh = bpy.data.meshes.new("hill")
    mesh.from_pydata(vertices.tolist(), [], triangles.tolist())
    obj = bpy.data.objects.new("hill", mesh)
    bpy.context.collection.objects.link(obj)
    return obj


def test_preview_wind_fills_the_store_with_a_developed_field(registered):
    scene = bpy.context.scene
    hill = _hill_object()
    item = scene.snowfall.terrain_objects.add()
    item.object = hill
    scene.snowfall.backend = "numpy"
    scene.snowfall.wind_resolution = 12
    scene.snowfall.heightmap_resolution = 24
    scene.snowfall.wind_speed = 4.0
    scene.snowfall.gust_strength = 0.0
    WindOverlay.clear()
    assert bpy.ops.snowfall.preview_wind(steps=6) == {"FINISHED"}
    store = WindOverlay.store
    field = store.wind_field
    assert field is not None and store.step_index == 6 and store.source == "preview"
    grid = field.grid
    assert field.u.shape == (grid.nz, grid.ny, grid.nx + 1)
    assert field.solid.any() and not field.solid.all()  # the hill is an obstacle
    # the wind blows: the inflow speed is reached over the hill, in the +x direction
    speed = store.field_speed_max()
    assert 3.0 < speed < 12.0
    top = field.u[-2].mean()
    assert top > 2.0
    # and it converts to an object
    assert bpy.ops.snowfall.wind_to_object(style="STREAMLINES") == {"FINISHED"}
    obj = bpy.context.view_layer.objects.active
    assert len(obj.data.attributes["speed"].data) == len(obj.data.points) > 0


def test_preview_plan_develops_the_flow_in_cells_per_step():
    from snowfall.snow_addon.settings import SnowSettings

    vertices = np.array([[0, 0, 0], [100, 0, 0], [0, 50, 10]], float)
    settings = SnowSettings(wind_resolution=20, wind_speed=5.0, gust_strength=0.0)
    planned, steps = preview_ops.preview_plan(settings, vertices, cells_per_step=1.0, steps=0)
    assert planned.time_step == pytest.approx(5.0 / 5.0)  # 5 m cells, 5 m/s: one cell per step
    assert steps == 40  # crossing 100 m twice at 5 m/s
    same, fixed = preview_ops.preview_plan(settings, vertices, cells_per_step=0.0, steps=7)
    assert same.time_step == settings.time_step and fixed == 7
