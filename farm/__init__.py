"""Render-farm files shipped with the add-on (docs/farm.md).

- ``snowfall_bake.py``: ``blender -b scene.blend --python-exit-code 1 --python
  snowfall_bake.py -- [--frame-start N] [--frame-end M] [--cache-folder DIR]
  [--resume-if-any] ...``: bakes through the installed add-on (operators/headless.py),
  one flushed progress line per frame, a non-zero exit status and one clear line on any
  failure.
- ``snowfall_render.py``: ``blender -b scene.blend --python-exit-code 1 --python
  snowfall_render.py -- --frames 1-8 --output /shared/render/frame_####``: renders baked
  frames on a worker without the add-on; refuses (exit 3) a Blender that cannot read the
  bake, a bake that is missing or does not reach the frames; ``--check`` lists the absolute
  paths the .blend uses and the bake's readers before a job is sent.
- ``bpy_blender.py``: Blender's ``-b file --python script -- args`` command line on the
  bpy module (pip's Blender), for farms and tests without a Blender binary.
- ``snowfall-bake-render.js``: a Flamenco 3 job type (a bake task, then render tasks in
  chunks that depend on it).
- ``snowfall-openjd.yaml``: an Open Job Description template (AWS Deadline Cloud) of the
  same shape.

The scripts run by path inside Blender; they import nothing from this package except
``snowfall_bake.py``, which finds the installed add-on itself.
"""
import os

#: This folder: copy it to the farm's shared storage (docs/farm.md).
FOLDER = os.path.dirname(os.path.abspath(__file__))
