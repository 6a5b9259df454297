"""Render the wind preview of a sample valley with Cycles, headless (the image in the
README: docs/wind_streamlines.png).

    .venv/bin/python tools/render_wind_preview.py [--output docs/wind_streamlines.png]
        [--samples 24] [--width 960] [--height 540] [--backend auto] [--steps 0]

Builds the mountain valley of ``snow_addon.scenes``, registers the add-on, runs Preview
Wind (wind only, no flakes) and Wind to Object (streamlines from an upwind rake, coloured
by speed), then renders with Cycles on the CPU. About a minute on 2 CPU cores.
This is a script that uses the installed package ``snowfall``, like the tests.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import bpy
from mathutils import Vector

import snowfall
from snowfall.operators.shown_wind import ShownWind
from snowfall.snow_addon.scenes import mountain_valley

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUTPUT = os.path.join(os.path.dirname(HERE), "docs", "wind_streamlines.png")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu", "numpy"))
    parser.add_argument("--steps", type=int, default=0,
                        help="wind steps (0 = enough for the wind to cross the valley twice)")
    parser.add_argument("--blend", default="", help="also save the scene to this .blend")
    return parser.parse_args(argv)


def terrain_material():
    """Snow-dusted rock: white on gentle slopes, grey-brown rock on steep ones."""
    material = bpy.data.materials.new("Valley Terrain")
    if material.node_tree is None:
        material.use_nodes = True
    nodes, links = material.node_tree.nodes, material.node_tree.links
    principled = next(n for n in nodes if n.type == "BSDF_PRINCIPLED")
    geometry = nodes.new("ShaderNodeNewGeometry")
    split = nodes.new("ShaderNodeSeparateXYZ")
    ramp = nodes.new("ShaderNodeValToRGB")
    ramp.color_ramp.elements[0].position = 0.78
    ramp.color_ramp.elements[0].color = (0.16, 0.14, 0.12, 1.0)
    ramp.color_ramp.elements[1].position = 0.88
    ramp.color_ramp.elements[1].color = (0.78, 0.81, 0.86, 1.0)
    links.new(geometry.outputs["Normal"], split.inputs["Vector"])
    links.new(split.outputs["Z"], ramp.inputs["Fac"])
    links.new(ramp.outputs["Color"], principled.inputs["Base Color"])
    principled.inputs["Roughness"].default_value = 0.85
    return material


def build_scene(args):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    snowfall.register()
    scene = bpy.context.scene

    vertices, triangles = mountain_valley(size_x=400.0, size_y=300.0, relief=60.0,
                                          resolution=129)
    mesh = bpy.data.meshes.new("Valley")
    mesh.from_pydata(vertices.tolist(), [], triangles.tolist())
    mesh.shade_smooth()
    mesh.materials.append(terrain_material())
    valley = bpy.data.objects.new("Valley", mesh)
    scene.collection.objects.link(valley)

    props = scene.snowfall
    props.terrain_objects.add().object = valley
    props.backend = args.backend
    props.wind_resolution = 48
    props.heightmap_resolution = 128
    props.wind_speed = 6.0
    props.wind_direction = math.radians(15.0)   # across the ridges, a little up the valley
    props.gust_strength = 0.15
    preview = scene.snowfall_wind_preview
    preview.placement = "UPWIND"      # a rake on the upwind side ...
    preview.slice_height = 0.35       # ... from the ground up to 35 % of the domain height
    preview.density = 32
    preview.speed_max = 10.0          # the colour scale: blue 0 m/s .. red 10 m/s
    preview.cells_per_step = 1.0
    return scene, valley


def light_and_camera(scene):
    world = bpy.data.worlds.new("Sky")
    if world.node_tree is None:
        world.use_nodes = True
    background = world.node_tree.nodes["Background"]
    background.inputs["Color"].default_value = (0.55, 0.66, 0.82, 1.0)
    background.inputs["Strength"].default_value = 0.6
    scene.world = world

    sun = bpy.data.lights.new("Sun", "SUN")
    sun.energy = 3.5
    sun.angle = math.radians(3.0)
    sun_object = bpy.data.objects.new("Sun", sun)
    sun_object.rotation_euler = (math.radians(50.0), 0.0, math.radians(-35.0))
    scene.collection.objects.link(sun_object)

    camera = bpy.data.cameras.new("Camera")
    camera.lens = 30.0
    camera.clip_end = 5000.0
    camera_object = bpy.data.objects.new("Camera", camera)
    camera_object.location = (-110.0, -440.0, 250.0)
    target = Vector((0.0, 15.0, 5.0))
    direction = target - camera_object.location
    camera_object.rotation_euler = direction.to_track_quat("-Z", "Y").to_euler()
    scene.collection.objects.link(camera_object)
    scene.camera = camera_object


def _flat_material(name, rgb):
    material = bpy.data.materials.new(name)
    if material.node_tree is None:
        material.use_nodes = True
    principled = next(n for n in material.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
    principled.inputs["Base Color"].default_value = rgb + (1.0,)
    principled.inputs["Emission Color"].default_value = rgb + (1.0,)
    principled.inputs["Emission Strength"].default_value = 1.0
    return material


def speed_legend(scene, streamlines, aspect):
    """A colour bar (a strip whose ``speed`` attribute runs over the scale, with the
    streamlines' own material) and its labels, fixed in the camera's view."""
    camera = scene.camera
    speed_max = float(streamlines["snowfall_speed_max"])
    distance = 10.0
    half_width = distance * 0.5 * camera.data.sensor_width / camera.data.lens
    half_height = half_width / aspect
    right, bottom = 0.93 * half_width, -0.86 * half_height
    width, height = 0.45 * half_width, 0.035 * half_height * 2.0
    left = right - width
    columns = 33
    xs = [left + width * i / (columns - 1) for i in range(columns)]
    vertices = [(x, bottom, -distance) for x in xs] + [(x, bottom + height, -distance) for x in xs]
    faces = [(i, i + 1, columns + i + 1, columns + i) for i in range(columns - 1)]
    mesh = bpy.data.meshes.new("Speed Legend")
    mesh.from_pydata(vertices, [], faces)
    speed = mesh.attributes.new("speed", "FLOAT", "POINT")
    values = [speed_max * i / (columns - 1) for i in range(columns)] * 2
    speed.data.foreach_set("value", values)
    mesh.materials.append(streamlines.active_material)
    bar = bpy.data.objects.new("Speed Legend", mesh)
    bar.parent = camera
    scene.collection.objects.link(bar)

    text_material = _flat_material("Legend Text", (0.02, 0.03, 0.05))
    size = 0.05 * half_height * 2.0
    labels = [(left + width * i / 4, "CENTER", f"{speed_max * i / 4:g}") for i in range(5)]
    for x, align, text in labels:
        curve = bpy.data.curves.new(f"Legend {text}", "FONT")
        curve.body = text
        curve.size = size
        curve.align_x = align
        curve.materials.append(text_material)
        label = bpy.data.objects.new(f"Legend {text}", curve)
        label.parent = camera
        label.location = (x, bottom + height + 0.35 * size, -distance)
        scene.collection.objects.link(label)
    title = bpy.data.curves.new("Legend Title", "FONT")
    title.body = "wind speed (m/s)"
    title.size = size
    title.align_x = "RIGHT"
    title.materials.append(text_material)
    title_object = bpy.data.objects.new("Legend Title", title)
    title_object.parent = camera
    title_object.location = (left - 0.4 * size, bottom + 0.1 * height, -distance)
    scene.collection.objects.link(title_object)


def render(scene, args):
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = args.samples
    scene.cycles.use_adaptive_sampling = True
    scene.cycles.use_denoising = True
    scene.cycles.max_bounces = 4
    scene.render.resolution_x = args.width
    scene.render.resolution_y = args.height
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
    scene.render.image_settings.color_mode = "RGB"
    scene.render.image_settings.compression = 100
    scene.view_settings.view_transform = "Standard"  # colours as the overlay's scale states
    scene.render.filepath = os.path.abspath(args.output)
    os.makedirs(os.path.dirname(scene.render.filepath), exist_ok=True)
    bpy.ops.render.render(write_still=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    scene, _valley = build_scene(args)
    light_and_camera(scene)

    result = bpy.ops.snowfall.preview_wind(steps=args.steps)
    if result != {"FINISHED"}:
        raise SystemExit(f"Preview Wind failed: {result}")
    store = ShownWind.store
    grid = store.wind_field.grid
    print(f"wind: {grid.nx}x{grid.ny}x{grid.nz} cells of {grid.cell_size:.3g} m, "
          f"{store.step_index} steps ({store.time:.0f} s), fastest "
          f"{store.field_speed_max():.2f} m/s, {time.perf_counter() - started:.1f} s so far")

    result = bpy.ops.snowfall.wind_to_object(style="STREAMLINES", thickness=0.06)
    if result != {"FINISHED"}:
        raise SystemExit(f"Wind to Object failed: {result}")
    streamlines = bpy.context.view_layer.objects.active
    print(f"{streamlines.name}: {len(streamlines.data.curves)} curves, "
          f"{len(streamlines.data.points)} points, speed scale 0 to "
          f"{streamlines['snowfall_speed_max']:.2f} m/s")
    speed_legend(scene, streamlines, args.width / args.height)
    if args.blend:
        bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(args.blend))

    render_start = time.perf_counter()
    render(scene, args)
    print(f"rendered {scene.render.filepath} in {time.perf_counter() - render_start:.1f} s "
          f"(total {time.perf_counter() - started:.1f} s)")
    snowfall.unregister()


if __name__ == "__main__":
    main()
