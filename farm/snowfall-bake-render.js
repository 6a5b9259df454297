// SPDX-License-Identifier: GPL-3.0-or-later
//
// Flamenco 3 job type: bake a scene's Snowfall once, then render its frames in chunks on
// every free worker, each reading the same cache folder on shared storage.
//
// Install: copy this file into the Manager's `scripts/` folder (beside flamenco-manager)
// and restart the Manager; the job type is then "snowfall-bake-render" (docs/farm.md).
// The bake task has the task type "snowfall-bake" (the `bake_task_type` setting): only
// workers that list that type in their flamenco-worker.yaml `task_types` take it, so
// list it on the GPU workers that have the add-on installed (or set the setting to
// "blender" to let any worker bake). Render tasks are ordinary "blender" tasks and need no
// add-on. The scripts snowfall_bake.py and snowfall_render.py (the add-on's farm/ folder)
// must be on shared storage (`farm_scripts`), as must the .blend and the cache folder.

const JOB_TYPE = {
    label: "Snowfall Bake + Render",
    description: "Bake the Snowfall simulation once, then render the frames in chunks",
    settings: [
        // Settings for artists to determine:
        { key: "frames", type: "string", required: true,
          eval: "f'{C.scene.frame_start}-{C.scene.frame_end}'",
          evalInfo: { showLinkButton: true, description: "Scene frame range" },
          description: "Frames to render. Examples: '47', '1-30', '3, 5-10, 47-327'; all " +
                       "must lie in the baked range" },
        { key: "chunk_size", type: "int32", default: 8, propargs: { min: 1 },
          description: "Number of frames to render in one render task", visible: "submission" },
        { key: "bake_frame_start", type: "int32", required: true,
          eval: "C.scene.frame_start", visible: "submission",
          description: "First frame of the bake (the simulation starts here)" },
        { key: "bake_frame_end", type: "int32", required: true,
          eval: "C.scene.frame_end", visible: "submission",
          description: "Last frame of the bake" },
        { key: "cache_folder", type: "string", subtype: "dir_path", default: "",
          visible: "submission",
          description: "Snowfall cache folder on shared storage (empty: the .blend's own " +
                       "blendcache_<name> folder beside it); stored relative to the .blend" },
        { key: "farm_scripts", type: "string", subtype: "dir_path", required: true,
          visible: "submission",
          description: "Folder on shared storage holding snowfall_bake.py and " +
                       "snowfall_render.py (the add-on's farm/ folder)" },
        { key: "bake_backend", type: "string", default: "auto",
          choices: ["auto", "gpu", "cpu", "numpy"], visible: "submission",
          description: "Where the simulation runs (auto: the GPU when the worker has one)" },
        { key: "bake_task_type", type: "string", default: "snowfall-bake",
          visible: "submission",
          description: "Task type of the bake task: only workers listing it in their " +
                       "task_types take it (give it to the GPU workers)" },

        // render_output_root + add_path_components determine the value of render_output_path.
        { key: "render_output_root", type: "string", subtype: "dir_path", required: true,
          visible: "submission",
          description: "Base directory of where render output is stored. Will have some " +
                       "job-specific parts appended to it" },
        { key: "add_path_components", type: "int32", required: true, default: 0,
          propargs: { min: 0, max: 32 }, visible: "submission",
          description: "Number of path components of the current blend file to use in the " +
                       "render output path" },
        { key: "render_output_path", type: "string", subtype: "file_path", editable: false,
          eval: "str(Path(abspath(settings.render_output_root), " +
                "last_n_dir_parts(settings.add_path_components), jobname, '{timestamp}', " +
                "'######'))",
          description: "Final file path of where render output will be saved" },

        // Automatically evaluated settings:
        { key: "blendfile", type: "string", required: true, visible: "web",
          description: "Path of the Blend file to bake and render" },
        { key: "format", type: "string", required: true, visible: "web",
          eval: "C.scene.render.image_settings.file_format" },
        { key: "scene", type: "string", required: true, eval: "C.scene.name", visible: "web",
          description: "Name of the scene to bake and render" },
    ]
};

function compileJob(job) {
    print("Snowfall bake + render job submitted");
    const settings = job.settings;
    checkSettings(settings);

    const renderOutput = renderOutputPath(job);
    // Make sure that when the job is investigated later, it shows the actually-used output:
    settings.render_output_path = renderOutput;

    const bakeTask = authorBakeTask(settings);
    job.addTask(bakeTask);
    for (const renderTask of authorRenderTasks(settings, renderOutput)) {
        renderTask.addDependency(bakeTask);
        job.addTask(renderTask);
    }
}

function checkSettings(settings) {
    const start = settings.bake_frame_start, end = settings.bake_frame_end;
    if (!Number.isInteger(start) || start < 1) {
        throw `bake_frame_start: ${start} is before frame 1 (particle caches start at 1)`;
    }
    if (!Number.isInteger(end) || end < start) {
        throw `bake_frame_end: ${end} is before bake_frame_start ${start}`;
    }
    if (!Number.isInteger(settings.chunk_size) || settings.chunk_size < 1) {
        throw `chunk_size: ${settings.chunk_size} must be 1 or more`;
    }
    if (!settings.farm_scripts) {
        throw "farm_scripts: empty; give the shared folder holding snowfall_bake.py";
    }
    for (const frame of frameChunker(settings.frames, 1)) {
        const number = parseInt(frame, 10);
        if (number < start || number > end) {
            throw `frames: frame ${frame} lies outside the baked range ${start}-${end}`;
        }
    }
}

// Do field replacement on the render output path.
function renderOutputPath(job) {
    let path = job.settings.render_output_path;
    if (!path) {
        throw "no render_output_path setting!";
    }
    return path.replace(/{([^}]+)}/g, (match, group0) => {
        switch (group0) {
        case "timestamp":
            return formatTimestampLocal(job.created);
        default:
            return match;
        }
    });
}

// Blender's own arguments before the script's: a script that raises ends Blender with 1.
function scriptArgs(script, settings) {
    return ["--python-exit-code", "1", "--python", path.join(settings.farm_scripts, script),
            "--", "--scene", settings.scene];
}

function authorBakeTask(settings) {
    const task = author.Task("snowfall-bake", settings.bake_task_type || "snowfall-bake");
    const command = author.Command("blender-render", {
        exe: "{blender}",
        exeArgs: "{blenderArgs}",
        argsBefore: [],
        blendfile: settings.blendfile,
        args: scriptArgs("snowfall_bake.py", settings).concat([
            "--frame-start", String(settings.bake_frame_start),
            "--frame-end", String(settings.bake_frame_end),
            "--cache-folder", settings.cache_folder || "",
            "--backend", settings.bake_backend || "auto",
            // A retried task (a worker died, the task was requeued) continues the bake.
            "--resume-if-any",
        ]),
    });
    task.addCommand(command);
    return task;
}

function authorRenderTasks(settings, renderOutput) {
    let renderTasks = [];
    const chunks = frameChunker(settings.frames, settings.chunk_size);
    for (const chunk of chunks) {
        const task = author.Task(`render-${chunk}`, "blender");
        const command = author.Command("blender-render", {
            exe: "{blender}",
            exeArgs: "{blenderArgs}",
            argsBefore: [],
            blendfile: settings.blendfile,
            args: scriptArgs("snowfall_render.py", settings).concat([
                "--frames", chunk,
                "--output", renderOutput,
                "--format", settings.format,
            ]),
        });
        task.addCommand(command);
        renderTasks.push(task);
    }
    return renderTasks;
}
