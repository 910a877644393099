package pluginrpc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/kernelhost/kernelhost/core"
)

// A Setting is one setting of a plugin (transportplugin.Setting): its
// description, which the plugin prints for the host (-describe), and where
// its value goes in the plugin's configuration C.
type Setting[C any] struct {
	spec SettingSpec
	// set stores a value of the setting's type (as Settings carries it) in
	// c; nil for a setting the plugin never receives (FileSetting).
	set func(c *C, v any) error
	def any // the default, of that type; nil: none
}

// StringSetting is a setting holding text.
func StringSetting[C any](name, def, help string, field func(*C) *string) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeString, Default: def, Help: help},
		set: setter(field), def: def}
}

// IntSetting is a setting holding an integer.
func IntSetting[C any](name string, def int, help string, field func(*C) *int) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeInt, Default: strconv.Itoa(def), Help: help},
		set: func(c *C, v any) error {
			n, ok := v.(int64)
			if !ok {
				return fmt.Errorf("a %T is no int", v)
			}
			*field(c) = int(n)
			return nil
		}, def: int64(def)}
}

// BoolSetting is a setting that is on or off.
func BoolSetting[C any](name string, def bool, help string, field func(*C) *bool) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeBool, Default: strconv.FormatBool(def), Help: help},
		set: setter(field), def: def}
}

// DurationSetting is a setting holding a duration ("90s", "2m").
func DurationSetting[C any](name string, def time.Duration, help string, field func(*C) *time.Duration) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeDuration, Default: def.String(), Help: help},
		set: setter(field), def: def}
}

// ObjectSetting is a setting holding a JSON object of strings; unset, the
// field stays nil. The host's errors about it never quote its text (it may
// hold secrets).
func ObjectSetting[C any](name, help string, field func(*C) *map[string]string) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeObject, Help: help},
		set: setter(field)}
}

// FileSetting is a setting naming a file that holds the value of the string
// setting of (a token kept out of ps): the host reads it, trailing line
// breaks dropped, and passes its text as of; giving both is an error.
func FileSetting[C any](name, of, help string) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeFile, FileOf: of, Help: help}}
}

// HostSetting is a setting of the host's own (such as "default-cwd") that
// the plugin receives too, as the host resolved it.
func HostSetting[C any](name string, field func(*C) *string) Setting[C] {
	return Setting[C]{spec: SettingSpec{Name: name, Type: TypeHost}, set: setter(field)}
}

func setter[C, T any](field func(*C) *T) func(*C, any) error {
	return func(c *C, v any) error {
		t, ok := v.(T)
		if !ok {
			var want T
			return fmt.Errorf("a %T does not fit a setting of type %T", v, want)
		}
		*field(c) = t
		return nil
	}
}

// Positive requires an int or duration above zero.
func (s Setting[C]) Positive() Setting[C] { return s.Min(1) }

// NotNegative requires an int or duration of zero or more.
func (s Setting[C]) NotNegative() Setting[C] { return s.Min(0) }

// Min requires an int (or a duration, in nanoseconds) of at least lo.
func (s Setting[C]) Min(lo int64) Setting[C] { s.spec.Min = &lo; return s }

// Between requires an int (or a duration, in nanoseconds) from lo to hi.
func (s Setting[C]) Between(lo, hi int64) Setting[C] {
	s.spec.Min, s.spec.Max = &lo, &hi
	return s
}

// OneOf requires a string to be one of values.
func (s Setting[C]) OneOf(values ...string) Setting[C] { s.spec.OneOf = values; return s }

// BoundsKernelStart says the duration bounds part of a kernel start in the
// plugin: the host's own bounds on a start are raised above the sum of such
// settings, so a start the settings allow is not cut short by the host.
func (s Setting[C]) BoundsKernelStart() Setting[C] {
	s.spec.KernelBound = BoundStart
	return s
}

// BoundsKernelRestart is BoundsKernelStart for a kernel restart.
func (s Setting[C]) BoundsKernelRestart() Setting[C] {
	s.spec.KernelBound = BoundRestart
	return s
}

// ServeConfigured is transportplugin.ServeConfigured.
func ServeConfigured[C any](settings []Setting[C], newTransport func(ctx context.Context, c C) (core.Transport, error), opts ...ServeOption) {
	d := describe(settings)
	for _, o := range opts {
		o(&d)
	}
	describeIfAsked(d)
	serve(func(ctx context.Context, s Settings) (core.Transport, error) {
		c, err := Configuration(settings, s)
		if err != nil {
			return nil, err
		}
		return newTransport(ctx, c)
	}, ProtocolVersion)
}

// Configuration is the C that settings make of the values s holds: each
// setting's value, or its default when s has none. A value in s that no
// setting declares, or of another type, is an error naming the setting.
func Configuration[C any](settings []Setting[C], s Settings) (C, error) {
	var c C
	byName := map[string]Setting[C]{}
	for _, st := range settings {
		byName[st.spec.Name] = st
		if st.def != nil && st.set != nil {
			if err := st.set(&c, st.def); err != nil {
				return c, fmt.Errorf("setting %s: its default: %w", st.spec.Name, err)
			}
		}
	}
	var errs []error
	_ = s.Each(func(name string, v any) error {
		st, ok := byName[name]
		switch {
		case !ok || st.set == nil:
			errs = append(errs, fmt.Errorf("setting %s: this plugin takes no such setting", name))
		default:
			if err := st.set(&c, v); err != nil {
				errs = append(errs, fmt.Errorf("setting %s: %w", name, err))
			}
		}
		return nil
	})
	return c, errors.Join(errs...)
}

// ServeOption adds to what a plugin says of itself before it is configured
// (Description).
type ServeOption func(*Description)

// RemoteKernels declares that the plugin's kernels may run on another
// machine (Description.RemoteKernels).
func RemoteKernels() ServeOption { return func(d *Description) { d.RemoteKernels = true } }

func describe[C any](settings []Setting[C]) Description {
	d := Description{Settings: make([]SettingSpec, len(settings))}
	for i, s := range settings {
		d.Settings[i] = s.spec
	}
	return d
}
