module github.com/videngage/engagement

go 1.26.8

require github.com/sethvargo/go-envconfig v1.4.3
