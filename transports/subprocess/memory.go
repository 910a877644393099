package subprocess

import (
	"bufio"
	"cmp"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Memory is what a process takes of the machine's memory, in bytes. RSS
// counts every page it maps, shared ones in full; PSS divides each shared
// page among the processes that map it (the sum over processes is what
// they take together); USS counts only the pages no other process maps
// (what ending it would free). Contexts forked from one template share its
// pages until they write them (issue 28), so RSS overstates them and PSS
// and USS are the honest figures.
type Memory struct {
	RSS, PSS, USS int64
}

func (m *Memory) add(o Memory) {
	m.RSS += o.RSS
	m.PSS += o.PSS
	m.USS += o.USS
}

// ProcessMemory reads pid's memory from /proc/pid/smaps_rollup; zero when
// it is gone (or the kernel has no smaps_rollup, before Linux 4.14).
func ProcessMemory(pid int) Memory {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return Memory{}
	}
	defer f.Close()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "Rss":
			m.RSS = kb << 10
		case "Pss":
			m.PSS = kb << 10
		case "Private_Clean", "Private_Dirty":
			m.USS += kb << 10
		}
	}
	return m
}

// MemoryStat is the memory of a group of interpreters: one language's
// interpreters in one role ("context": those of live kernels; "pool": the
// warm pool's ready ones; "fork-template": the fork server's template;
// "retired-fork-template": sandboxed templates replaced, which live on
// until the last context forked from them ended).
type MemoryStat struct {
	Language, Role string
	Interpreters   int
	Memory
}

// MemoryStats reports the memory of every interpreter the transport runs,
// by language and role, sorted, for metrics.
func (t *Transport) MemoryStats() []MemoryStat {
	by := map[[2]string]*MemoryStat{}
	add := func(lang, role string, p *proc) {
		if p == nil || p.isGone() {
			return
		}
		pid, _, _ := p.ids()
		key := [2]string{lang, role}
		st := by[key]
		if st == nil {
			st = &MemoryStat{Language: lang, Role: role}
			by[key] = st
		}
		st.Interpreters++
		st.add(ProcessMemory(pid))
	}
	t.live.Range(func(key, _ any) bool {
		k := key.(*Kernel)
		add(k.lang.name, "context", k.live.Load())
		return true
	})
	for lang, pl := range t.pools {
		pl.mu.Lock()
		var ready []*proc
		for _, s := range pl.slots {
			if isClosed(s.done) && s.p != nil {
				ready = append(ready, s.p)
			}
		}
		pl.mu.Unlock()
		for _, p := range ready {
			add(lang, "pool", p)
		}
	}
	for lang, fs := range t.forks {
		fs.mu.Lock()
		p := fs.tmpl
		fs.mu.Unlock()
		add(lang, "fork-template", p)
		for _, e := range fs.retired() {
			add(lang, "retired-fork-template", e)
		}
	}
	out := make([]MemoryStat, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b MemoryStat) int {
		return cmp.Or(strings.Compare(a.Language, b.Language), strings.Compare(a.Role, b.Role))
	})
	return out
}

// track counts k among the live kernels (MemoryStats) until its Shutdown.
func (t *Transport) track(k *Kernel) {
	t.live.Store(k, struct{}{})
	k.forget = func() { t.live.Delete(k) }
}
