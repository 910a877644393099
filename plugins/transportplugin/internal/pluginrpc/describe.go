package pluginrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DescribeArg is the argument that makes a plugin binary print its
// Description as JSON on stdout and exit, instead of serving: the host runs
// it to learn a plugin's settings before it parses its own flags, for -help
// and validation, without the go-plugin handshake.
const DescribeArg = "-describe"

// Description is what a plugin says of itself before it is configured: the
// settings it takes, which the host merges into its own (a flag, a
// KERNELHOST_* variable, a config file key and a line of -help each, checked
// against the bounds given here before the plugin gets them).
type Description struct {
	// Protocol is the plugin's ProtocolVersion.
	Protocol int           `json:"protocol"`
	Settings []SettingSpec `json:"settings"`
	// RemoteKernels says the transport's kernels may run on another
	// machine (core.TransportInfo.RemoteKernels): the host needs to know
	// before it starts the plugin, to settle its default cwd.
	RemoteKernels bool `json:"remote_kernels,omitempty"`
}

// Setting types, as SettingSpec.Type names them, and the Go type of their
// values in Settings.
const (
	TypeString   = "string"   // string
	TypeInt      = "int"      // int64
	TypeBool     = "bool"     // bool
	TypeDuration = "duration" // time.Duration
	TypeObject   = "object"   // map[string]string, given as a JSON object
	// TypeFile is a file the host reads into the setting FileOf (a token
	// kept out of ps and /proc/PID/environ); the plugin never gets it.
	TypeFile = "file"
	// TypeHost is a setting of the host's own that the plugin receives
	// (as a string), such as default-cwd; Help and Default are the host's.
	TypeHost = "host"
)

// Bounds of a kernel start or restart, as SettingSpec.KernelBound names
// them: the host's own bounds on those calls are raised above the sum of a
// plugin's settings of each kind, so a slow start its settings allow is not
// cut short by the host.
const (
	BoundStart   = "start"
	BoundRestart = "restart"
)

// SettingSpec describes one setting of a plugin.
type SettingSpec struct {
	Name string `json:"name"` // the flag, config key and (KERNELHOST_NAME) variable
	Type string `json:"type"` // one of the Type* constants
	// Default is the value the plugin uses when the setting is not given,
	// as a flag would take it ("2m0s", "true", "python3"); "" for none.
	Default string `json:"default,omitempty"`
	Help    string `json:"help,omitempty"`
	// Min and Max bound an int or a duration (in nanoseconds); OneOf lists
	// a string's values.
	Min   *int64   `json:"min,omitempty"`
	Max   *int64   `json:"max,omitempty"`
	OneOf []string `json:"one_of,omitempty"`
	// FileOf is the setting a TypeFile setting holds the value of.
	FileOf string `json:"file_of,omitempty"`
	// KernelBound marks a duration that bounds the plugin's own kernel
	// starts (BoundStart) or restarts (BoundRestart).
	KernelBound string `json:"kernel_bound,omitempty"`
}

// describeIfAsked prints desc and exits when the process was run with
// DescribeArg.
func describeIfAsked(desc Description) {
	if len(os.Args) != 2 || os.Args[1] != DescribeArg {
		return
	}
	desc.Protocol = ProtocolVersion
	if desc.Settings == nil {
		desc.Settings = []SettingSpec{}
	}
	if err := json.NewEncoder(os.Stdout).Encode(desc); err != nil {
		fmt.Fprintln(os.Stderr, "describe:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// maxDescriptionBytes bounds what Describe reads of a plugin's output.
const maxDescriptionBytes = 1 << 20

// Describe runs the plugin at path with DescribeArg and returns the
// Description it prints. ctx bounds the run (a plugin that hangs is killed).
// The error says what went wrong in the plugin's own words where it has
// any: a binary that is no kernelhost plugin, or one built before plugins
// described themselves, exits with go-plugin's message on stderr.
func Describe(ctx context.Context, path string) (Description, error) {
	cmd := exec.CommandContext(ctx, path, DescribeArg)
	// As a launched plugin's: none of the host's settings and secrets.
	cmd.Env = withoutHostSettings(os.Environ())
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = maxDescriptionBytes, 4<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second // a child holding the pipes open does not hold us
	err := cmd.Run()
	if stdout.over {
		return Description{}, fmt.Errorf("describe %s: its description is over %d bytes", path, maxDescriptionBytes)
	}
	if ctx.Err() != nil {
		return Description{}, fmt.Errorf("describe %s: no answer in time: %w", path, ctx.Err())
	}
	if err != nil {
		err = fmt.Errorf("describe %s: %w (not a kernelhost transport plugin, or one built before plugins described their settings)", path, err)
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w; it said: %s", err, firstLine(msg))
		}
		return Description{}, err
	}
	var d Description
	dec := json.NewDecoder(bytes.NewReader(stdout.buf.Bytes()))
	if err := dec.Decode(&d); err != nil {
		return Description{}, fmt.Errorf("describe %s: not a plugin description: %w", path, err)
	}
	if d.Protocol != ProtocolVersion {
		return Description{}, fmt.Errorf("describe %s: plugin protocol %d, the host speaks %d: rebuild the plugin", path, d.Protocol, ProtocolVersion)
	}
	return d, d.check()
}

// check refuses a description the host could not turn into settings.
func (d Description) check() error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range d.Settings {
		if s.Name == "" || strings.ContainsAny(s.Name, " =\t\n") || strings.HasPrefix(s.Name, "-") {
			errs = append(errs, fmt.Errorf("setting %q: not a flag name", s.Name))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("setting %s: described twice", s.Name))
		}
		seen[s.Name] = true
		switch s.Type {
		case TypeString, TypeInt, TypeBool, TypeDuration, TypeObject, TypeHost:
		case TypeFile:
			if s.FileOf == "" {
				errs = append(errs, fmt.Errorf("setting %s: a file of no setting", s.Name))
			}
		default:
			errs = append(errs, fmt.Errorf("setting %s: unknown type %q (a newer plugin?)", s.Name, s.Type))
		}
		if s.KernelBound != "" && (s.Type != TypeDuration || s.KernelBound != BoundStart && s.KernelBound != BoundRestart) {
			errs = append(errs, fmt.Errorf("setting %s: kernel bound %q on a %s", s.Name, s.KernelBound, s.Type))
		}
	}
	for _, s := range d.Settings {
		if s.Type == TypeFile && !seen[s.FileOf] {
			errs = append(errs, fmt.Errorf("setting %s: file of %s, which the plugin does not describe", s.Name, s.FileOf))
		}
	}
	return errors.Join(errs...)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var errTooMuch = errors.New("output over its limit")

// limitedBuffer keeps the first limit bytes written to it and notes whether
// more came. (It has no ReadFrom, which io.Copy would use instead of Write.)
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.buf.Len(); len(p) > room {
		b.over = true
		b.buf.Write(p[:max(room, 0)])
		return 0, errTooMuch // ends the copy: the plugin's next write gets EPIPE
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) String() string { return b.buf.String() }

var _ io.Writer = (*limitedBuffer)(nil)
