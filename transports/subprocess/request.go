package subprocess

import "sync"

// running is the request an interpreter runs, the one place its msg_id is
// kept: Execute begins it as it sends it, its idle (or the interpreter's
// end) ends it. opened says its busy was delivered: until then its output
// is held, so that nothing of it comes before its busy and execute_input.
// A cell (a request that is not silent) counts in the transport's cells
// while it runs.
type running struct {
	mu     sync.Mutex
	id     string // "": none
	opened bool
	cells  *cellActivity // the transport's (nil: none)
	cell   bool          // the running request counts in cells
}

// begin makes id the running request, not opened yet; cell: it is a cell.
func (r *running) begin(id string, cell bool) {
	r.mu.Lock()
	r.endCell()
	r.id, r.opened = id, false
	if cell && r.cells != nil {
		r.cell = true
		r.cells.begin()
	}
	r.mu.Unlock()
}

// endCell takes the running request out of cells, if it counts there.
func (r *running) endCell() {
	if r.cell {
		r.cell = false
		r.cells.end()
	}
}

// current is the running request's id; "" when none.
func (r *running) current() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// now is the running request's id ("" when none) and whether it opened.
func (r *running) now() (id string, opened bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id, r.opened
}

// open notes that request id's busy was delivered.
func (r *running) open(id string) {
	r.mu.Lock()
	if r.id == id {
		r.opened = true
	}
	r.mu.Unlock()
}

// end ends request id if it is the running one; any request when id is "".
func (r *running) end(id string) {
	r.mu.Lock()
	if id == "" || r.id == id {
		r.id, r.opened = "", false
		r.endCell()
	}
	r.mu.Unlock()
}
