package main

import "github.com/longshore/longshore/feed"

// feedDirOf is the feed's directory: --feed-dir, else the default
// (feed.DefaultDir).
func feedDirOf(o options) string {
	if o.feedDir != "" {
		return o.feedDir
	}
	return feed.DefaultDir()
}
