// Package flagenv lets environment variables stand in for the daemons'
// flags, the way containers and service managers configure them:
// LONGSHORE_COMMIT_EVERY=10 is --commit-every 10.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Prefix starts every variable that stands in for a flag.
const Prefix = "LONGSHORE_"

// Name is the environment variable that sets flag name.
func Name(name string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Set sets each flag of fs whose variable (Name) is present in
// the environment. Call it before fs.Parse: a flag on the command line
// then wins over the environment. Variables that name no flag are ignored
// (LONGSHORE_* is shared with other tools); a value a flag refuses is an
// error, every one reported at once.
func Set(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := lookup(Name(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (--%s): %w", Name(f.Name), v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}
