// A stand-in for the Flamenco 3 Manager's job compiler, for tests: it implements the
// documented job-type API (author.Task, author.Command, task.addCommand,
// task.addDependency, job.addTask, frameChunker, path, print, formatTimestampLocal) and
// runs a job type file's compileJob for each job given.
//
//   node flamenco_harness.js JOB_TYPE.js < jobs.json   ->   results as JSON on stdout
//
// jobs.json: [{"settings": {...}, "created": "2026-01-02T03:04:05Z"}, ...]; each result is
// {"tasks": [{"name", "type", "commands": [{"type", "parameters"}], "dependencies":
// [names]}], "settings": the job's settings after compiling} or {"error": text} where
// compileJob throws. JOB_TYPE itself is returned as "job_type".
"use strict";
const fs = require("fs");
const nodePath = require("path");
const vm = require("vm");

// Flamenco's frame-range syntax: "1-10, 15, 20..22" -> [1..10, 15, 20, 21, 22].
function frameRangeExplode(text) {
    const frames = [];
    for (let part of String(text).split(",")) {
        part = part.trim().replace("..", "-");
        if (part === "") continue;
        const match = /^(\d+)(?:-(\d+))?$/.exec(part);
        if (!match) throw `invalid frame range '${part}'`;
        const start = parseInt(match[1], 10);
        const end = match[2] === undefined ? start : parseInt(match[2], 10);
        if (end < start) throw `invalid frame range '${part}'`;
        for (let f = start; f <= end; f++) frames.push(f);
    }
    return frames;
}

// Consecutive frames as "a-b", others comma-separated: [1,2,3,5] -> "1-3,5".
function frameRangeMerge(frames) {
    const parts = [];
    let i = 0;
    while (i < frames.length) {
        let j = i;
        while (j + 1 < frames.length && frames[j + 1] === frames[j] + 1) j++;
        parts.push(j > i ? `${frames[i]}-${frames[j]}` : `${frames[i]}`);
        i = j + 1;
    }
    return parts.join(",");
}

function frameChunker(frames, chunkSize) {
    const all = frameRangeExplode(frames);
    const chunks = [];
    for (let i = 0; i < all.length; i += chunkSize) {
        chunks.push(frameRangeMerge(all.slice(i, i + chunkSize)));
    }
    return chunks;
}

class Task {
    constructor(name, type) {
        this.name = name;
        this.type = type;
        this.commands = [];
        this.dependencies = [];
    }
    addCommand(command) { this.commands.push(command); }
    addDependency(task) {
        if (!(task instanceof Task)) throw "addDependency needs a task";
        this.dependencies.push(task);
    }
}

function compile(source, jobSpec) {
    const tasks = [];
    const job = {
        settings: JSON.parse(JSON.stringify(jobSpec.settings)),
        created: new Date(jobSpec.created || "2026-01-02T03:04:05Z"),
        addTask(task) {
            if (!(task instanceof Task)) throw "job.addTask needs a task";
            tasks.push(task);
        },
    };
    const sandbox = {
        print: (...args) => process.stderr.write(args.map(String).join(" ") + "\n"),
        author: {
            Task: (name, type) => new Task(name, type),
            Command: (type, parameters) => ({ type, parameters }),
        },
        path: {
            join: (...parts) => nodePath.posix.join(...parts),
            dirname: (p) => nodePath.posix.dirname(p),
            basename: (p) => nodePath.posix.basename(p),
            stem: (p) => nodePath.posix.parse(p).name,
        },
        frameChunker,
        formatTimestampLocal: (date) => date.toISOString().replace(/[-:]/g, "").slice(0, 15),
    };
    vm.createContext(sandbox);
    const exported = vm.runInContext(source + "\n;({JOB_TYPE, compileJob});", sandbox);
    try {
        exported.compileJob(job);
    } catch (error) {
        return { error: String(error), job_type: exported.JOB_TYPE };
    }
    for (const task of tasks) {
        for (const dependency of task.dependencies) {
            if (!tasks.includes(dependency)) throw `task ${task.name} depends on a task not in the job`;
        }
    }
    return {
        job_type: exported.JOB_TYPE,
        settings: job.settings,
        tasks: tasks.map((task) => ({
            name: task.name,
            type: task.type,
            commands: task.commands,
            dependencies: task.dependencies.map((d) => d.name),
        })),
    };
}

const source = fs.readFileSync(process.argv[2], "utf8");
const jobs = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(jobs.map((spec) => compile(source, spec))));
