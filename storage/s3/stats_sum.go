package s3

// Add is s's counters and o's summed, field by field: the figures of a
// node reading through several stores (a mixture's sources). The rate
// limits (Rate, RateLow, Ceiling) are summed too, the node's limit over
// the stores together, except that a store without one (0) leaves the
// sum without one (0); Budget is the shares summed, the node's share
// when the stores split it (node.StoreBudget).
func (s Stats) Add(o Stats) Stats {
	s.Requests += o.Requests
	s.Retries += o.Retries
	s.RetriesByCause.Throttle += o.RetriesByCause.Throttle
	s.RetriesByCause.Server += o.RetriesByCause.Server
	s.RetriesByCause.Timeout += o.RetriesByCause.Timeout
	s.RetriesByCause.Conn += o.RetriesByCause.Conn
	s.RetriesByCause.BadResponse += o.RetriesByCause.BadResponse
	s.RetriesByCause.Stall += o.RetriesByCause.Stall
	s.Throttled += o.Throttled
	s.RetryAfterHonoured += o.RetryAfterHonoured
	s.Backoff += o.Backoff
	s.Timeouts += o.Timeouts
	s.Stalls += o.Stalls
	s.BadResponses += o.BadResponses
	s.Verified += o.Verified
	s.RateWaits += o.RateWaits
	s.RateWait += o.RateWait
	s.Rate = addLimits(s.Rate, o.Rate)
	s.RateLow = addLimits(s.RateLow, o.RateLow)
	s.RateCuts += o.RateCuts
	s.Budget += o.Budget
	s.Ceiling = addLimits(s.Ceiling, o.Ceiling)
	s.Hedges += o.Hedges
	s.HedgeWins += o.HedgeWins
	s.HedgesCancelled += o.HedgesCancelled
	s.HedgesDenied += o.HedgesDenied
	s.Errors += o.Errors
	s.BytesRead += o.BytesRead
	s.BytesWritten += o.BytesWritten
	return s
}

// addLimits sums two rate limits, 0 (none) in either making none.
func addLimits(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a + b
}
