package main

import "runtime/debug"

// moduleVersion is the version of github.com/cert-manager/cert-manager built in.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/cert-manager/cert-manager" {
				return dep.Version
			}
		}
	}
	return "unknown"
}
