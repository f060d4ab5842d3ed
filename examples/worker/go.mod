module example.com/leasehold-worker

go 1.26.8

require github.com/leasehold/leasehold v0.0.0

replace github.com/leasehold/leasehold => ../..
