package throttle

// deque is a ring buffer of entries: push and pop at both ends, amortised
// without allocation once it has grown to its working size.
type deque[E any] struct {
	buf  []E // len is a power of two or zero
	head int
	n    int
}

func (d *deque[E]) len() int { return d.n }

func (d *deque[E]) grow() {
	size := len(d.buf) * 2
	if size == 0 {
		size = 16
	}
	nb := make([]E, size)
	for i := range d.n {
		nb[i] = d.buf[(d.head+i)&(len(d.buf)-1)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque[E]) pushBack(e E) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = e
	d.n++
}

func (d *deque[E]) pushFront(e E) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = e
	d.n++
}

// insert puts e at position i (0: the front, len: the back), moving the
// entries from i on one place back.
func (d *deque[E]) insert(i int, e E) {
	d.pushBack(e)
	for j := d.n - 1; j > i; j-- {
		*d.at(j) = *d.at(j - 1)
	}
	*d.at(i) = e
}

// remove takes out the entry at position i, moving the entries on its
// shorter side one place towards it: taking out one near either end (the
// oldest, as callers give up in age order) costs little however long
// the deque.
func (d *deque[E]) remove(i int) {
	var zero E
	if i < d.n/2 {
		for j := i; j > 0; j-- {
			*d.at(j) = *d.at(j - 1)
		}
		*d.at(0) = zero // let go of what it refers to
		d.head = (d.head + 1) & (len(d.buf) - 1)
	} else {
		for j := i; j < d.n-1; j++ {
			*d.at(j) = *d.at(j + 1)
		}
		*d.at(d.n - 1) = zero
	}
	d.n--
}

// front returns a pointer to the first entry; the deque must not be empty.
func (d *deque[E]) front() *E { return &d.buf[d.head] }

// back returns a pointer to the last entry; the deque must not be empty.
func (d *deque[E]) back() *E { return &d.buf[(d.head+d.n-1)&(len(d.buf)-1)] }

// at returns a pointer to entry i (0 is the front).
func (d *deque[E]) at(i int) *E { return &d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *deque[E]) popFront() E {
	var zero E
	e := d.buf[d.head]
	d.buf[d.head] = zero // do not retain the item
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	return e
}

// filter keeps, in order, the entries for which keep returns true.
func (d *deque[E]) filter(keep func(*E) bool) {
	var zero E
	w := 0
	for i := range d.n {
		e := d.at(i)
		if keep(e) {
			if w != i {
				*d.at(w) = *e
			}
			w++
		}
	}
	for i := w; i < d.n; i++ {
		*d.at(i) = zero
	}
	d.n = w
}
