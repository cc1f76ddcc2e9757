package crypto_test

import (
	"fmt"

	"github.com/nzcfed/nzc/crypto"
)

// A hospital seals its votes so that only the aggregator can read them.
func ExampleSeal() {
	aggregator, err := crypto.GenerateIdentity()
	if err != nil {
		panic(err)
	}
	other, _ := crypto.GenerateIdentity()
	sealed, err := crypto.Seal([]byte("votes"), aggregator.Recipient())
	if err != nil {
		panic(err)
	}
	plain, err := crypto.Open(sealed, aggregator)
	fmt.Printf("%s %v\n", plain, err)
	_, err = crypto.Open(sealed, other)
	fmt.Println(err != nil)
	// Output:
	// votes <nil>
	// true
}
