package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// envPrefix names the environment variables that stand in for flags:
// LONGSHORE_COMMIT_EVERY=10 is --commit-every 10. Containers and service
// managers configure the daemons this way.
const envPrefix = "LONGSHORE_"

// flagEnv is the environment variable that sets flag name.
func flagEnv(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagsFromEnv sets each flag of fs whose variable (flagEnv) is present in
// the environment. Call it before fs.Parse: a flag on the command line
// then wins over the environment. Variables that name no flag are ignored
// (LONGSHORE_* is shared with other tools); a value a flag refuses is an
// error, every one reported at once.
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := lookup(flagEnv(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (--%s): %w", flagEnv(f.Name), v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}
