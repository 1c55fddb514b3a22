package optionstest

import "testing"

// ValidateCase is one row of a service's Validate table: Modify changes the defaults, and the
// error must name every string in WantErr (none: Validate must succeed).
type ValidateCase[O any] struct {
	Name    string
	Modify  func(O)
	WantErr []string
}

// ValidateTable runs each case as a subtest on fresh defaults from newOptions, built under env
// (every variable New reads, "" to clear it, so the host's environment cannot leak in).
func ValidateTable[O interface{ Validate() error }](t *testing.T, env map[string]string, newOptions func() O,
	cases []ValidateCase[O],
) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			setEnv(t, env, nil)
			o := newOptions()
			c.Modify(o)
			CheckErrors(t, o.Validate(), c.WantErr...)
		})
	}
}

// FlagCase is one row of a service's flag table: under Env (on top of the table's), parsing
// Args must give the defaults changed by Want.
type FlagCase[O any] struct {
	Name string
	Env  map[string]string
	Args []string
	Want func(O)
}

// FlagTable runs each case as a subtest: it parses the case's Args into fresh defaults and
// compares every field with the expected options. A row setting every flag proves each one is
// bound to its own field; a row with Env alone proves which variables New reads.
func FlagTable[S comparable, O interface {
	*S
	Flagger
}](t *testing.T, env map[string]string, newOptions func() O, cases []FlagCase[O]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			setEnv(t, env, c.Env)
			want := newOptions()
			c.Want(want)

			got := newOptions()
			ParseFlags(t, got, c.Args...)
			if *got != *want {
				t.Errorf("options = %+v, want %+v", *got, *want)
			}
		})
	}
}

func setEnv(t *testing.T, base, overrides map[string]string) {
	t.Helper()
	for k, v := range base {
		t.Setenv(k, v)
	}
	for k, v := range overrides {
		t.Setenv(k, v)
	}
}
