module github.com/aaatp/aaatp

go 1.26

require (
	github.com/fiorix/go-diameter/v4 v4.0.4 // indirect
	github.com/ishidawataru/sctp v0.0.0-20251114114122-19ddcbc6aae2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)
