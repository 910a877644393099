package subprocess

import "github.com/kernelhost/kernelhost/transports/subprocess/internal/cgroup"

// Limits per context: each interpreter, with everything it starts, gets a
// memory limit, a number of processes and a CPU weight in cgroups of its
// own. Where this process's cgroup v2 offers a controller (delegated, with
// the controller enabled for its children), the limit goes into the
// interpreter's v2 cgroup (internal/cgroup). Where it does not, the cgroup v1
// hierarchy of that controller is used, under this process's own cgroup
// there: v1 has no clone-into-cgroup, so the thread that forks the
// interpreter moves itself into the interpreter's v1 cgroups for the fork
// and back after it (the child inherits the forking thread's cgroups; the
// Go runtime makes no thread from a locked one, so no runtime thread lands
// there).

// Limits bound one interpreter and everything it starts (internal/cgroup).
// Zero: no limit.
type Limits = cgroup.Limits

// ParseBytes reads a size: a number of bytes, optionally with a unit (K, M,
// G, T for powers of 1000; KiB, MiB, GiB, TiB for powers of 1024; B).
// "" and "0" are 0.
func ParseBytes(s string) (int64, error) { return cgroup.ParseBytes(s) }
