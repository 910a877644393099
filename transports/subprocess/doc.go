// Package subprocess is kernelhost's default transport: each kernel is one
// long-lived local interpreter process (python3, bash, node, Rscript or a
// JVM running jshell), started in the context's cwd and kept for the
// context's lifetime, so state persists across executions.
//
// The interpreter runs a small driver program (drivers/) that reads
// requests on fd 3 and writes messages on fd 4 (python: as frames in fd 1),
// leaving fd 1 and 2 to the interpreter. docs/drivers.md describes the
// protocol and the output order it guarantees, with a section per driver.
//
// Where things are:
//
//   - driver.go: the driver interface and the registration of languages
//     (register, Interpreters); python.go, node.go, bash.go, r.go,
//     java.go: one language each, all of its rules (start, request framing,
//     interrupt, cwd move, message channel) and its registration. Adding a
//     language is its file and its driver script here, and outside the
//     package its snippets, goldens, a docs row and its Debian package
//     (docs/drivers.md, "Where a language lives", lists them).
//   - transport.go: Transport (Options, StartKernel); kernel.go: Kernel
//     (Execute, Interrupt, Restart, Shutdown); pool.go: the warm pool.
//   - proc.go: one interpreter process, its pipes and its lifecycle, and
//     the one way one comes to be (newInterpreter: started, or forked);
//     request.go: the request it runs; msgreader.go (procReader),
//     msglines.go, frames.go: the reader of its pipes; procexit.go and
//     reap.go: how it is killed and reaped; sandbox.go, network.go: the
//     transport's side of its sandbox and its network.
//   - internal/sandbox: what it runs in (sandbox.Sandbox): bwrap's walls,
//     the hidden paths and kernel knobs, its network (pasta), the host's
//     own runs of an interpreter (ToolRunner) and variables
//     (WithoutHostVars).
//   - internal/cgroup: its cgroups (cgroup.Set): a cgroup v2 of its own
//     that ends everything it started, and its limits (Limits).
//   - fork.go, forkserver.go, forkline.go, forksandbox.go, family.go:
//     contexts by fork, for a driver that forks (forker: python's).
//   - internal/jscompile: the javascript and typescript cell compiler.
package subprocess
