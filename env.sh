# source env.sh: the cgo flags the Makefile computes (make cgo-env), for
# running go by hand in this checkout.
eval "$(make -s --no-print-directory -C "$(dirname "${BASH_SOURCE[0]:-$0}")" cgo-env)"
