package mutex

// Abandon stops the ticket's renewal without leaving the queue: the
// waiter died.
func Abandon(t *Ticket) { t.abandon() }

// StopRenewal stops the ticket's renewal, which keeps it queued: a waiter
// paused past its waiter TTL.
func StopRenewal(t *Ticket) {
	t.stop()
	<-t.done
}
