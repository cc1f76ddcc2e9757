package cli

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/mechanism"
)

// MechanismFlags are the flags that describe an aggregation mechanism: one
// per field of mechanism.Params, named by its configuration key
// (max_refusals → --max-refusals) with its help text, so that a parameter
// has one name in a flag, a configuration file and the ledger.
type MechanismFlags struct {
	Mechanism string
	P         mechanism.Params
}

// AddMechanismFlags adds the mechanism flags to cmd: --mechanism (default
// def), every parameter, and --teachers with help teachersHelp.
func AddMechanismFlags(cmd *cobra.Command, def, teachersHelp string) *MechanismFlags {
	f := &MechanismFlags{}
	fs := cmd.Flags()
	fs.StringVar(&f.Mechanism, "mechanism", def, "aggregation mechanism: "+kindList())
	v := reflect.ValueOf(&f.P).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		key := field.Tag.Get("mapstructure")
		if key == "-" || key == "name" {
			continue
		}
		name, help := strings.ReplaceAll(key, "_", "-"), field.Tag.Get("help")
		switch ptr := v.Field(i).Addr().Interface().(type) {
		case *float64:
			fs.Float64Var(ptr, name, 0, help)
		case *int:
			fs.IntVar(ptr, name, 0, help)
		case *mechanism.Noise:
			fs.StringVar((*string)(ptr), name, "", help+"; nzc defaults to laplace")
		default:
			panic(fmt.Sprintf("cli: no flag type for mechanism parameter %s (%T)", key, ptr))
		}
	}
	fs.IntVar(&f.P.Teachers, "teachers", 0, teachersHelp)
	return f
}

// kindList names the registered mechanisms, e.g. "nzc, lnmax or gnmax".
func kindList() string {
	var names []string
	for _, k := range mechanism.Kinds() {
		names = append(names, string(k))
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Params returns the mechanism's parameters as given (nzc's noise defaults
// to Laplace); the class count is left to the caller.
func (f *MechanismFlags) Params() mechanism.Params {
	p := f.P
	p.Mechanism = mechanism.Kind(f.Mechanism)
	if p.Mechanism == mechanism.NZC && p.Noise == "" {
		p.Noise = mechanism.NoiseLaplace
	}
	return p
}
