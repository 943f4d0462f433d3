# name, old, new (applied once to internal/outbox/outbox.go)
M = [
 ("inline-answer-beside-writer", "case inline && o.BP.InHandler == 0 && o.inlineLocked():", "case inline && o.BP.InHandler == 0 && o.tw != nil:"),
 ("inline-post-beside-writer", "if alone && !o.closed && o.inlineLocked() {", "if alone && !o.closed && o.tw != nil {"),
 ("no-kick-after-inline", "\tif !o.closed && (len(o.q) > 0 || o.flushEnd) {\n\t\to.kickLocked()\n\t}\n\to.Mu.Unlock()\n}\n\n// Held", "\to.Mu.Unlock()\n}\n\n// Held"),
 ("cut-rest-behind-queue", "o.q = slices.Insert(o.q, 0, msg[n:])", "o.q = slices.Insert(o.q, len(o.q), msg[n:])"),
 ("inline-answer-not-drained", "\to.drainedLocked() // an answer written whole leaves the backlog\n", ""),
 ("cut-answer-not-counted", "\t\tif answers > 0 && o.BP != nil {\n\t\t\to.BP.Queued += answers\n\t\t}\n\t} else {\n\t\to.Inlined++", "\t} else {\n\t\to.Inlined++"),
 ("inline-after-flush-end", "if o.tw == nil || o.writing || len(o.q) > 0 || o.flushEnd {", "if o.tw == nil || o.writing || len(o.q) > 0 {"),
 ("batch-never-drains", "\t\t\to.BP.Writing = 0\n\t\t\to.drainedLocked()", "\t\t\to.drainedLocked()"),
 ("inline-answer-with-handlers", "case inline && o.BP.InHandler == 0 && o.inlineLocked():", "case inline && o.inlineLocked():"),
 ("inline-post-not-alone", "if alone && !o.closed && o.inlineLocked() {", "if !o.closed && o.inlineLocked() {"),
]
