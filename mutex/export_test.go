package mutex

// Abandon stops the ticket's renewal without leaving the queue: the
// waiter died.
func Abandon(t *Ticket) { t.abandon() }
