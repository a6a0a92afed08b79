package dynamo_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// A limiter on a DynamoDB table. New makes no request; the table must
// exist (CreateTable makes it, once, at deploy time).
func ExampleNew() {
	client := dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("id", "secret", ""),
	})
	store, err := dynamo.New(client, dynamo.WithTable("ratelimit"))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratelimit.New(store, algorithms.GCRA(100, time.Minute, 20), ratelimit.WithName("api"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Table(), lim.Namespace())
	// Output: ratelimit api:gcra
}

// CreateTable makes the table with the store's layout and enables TTL; it
// is idempotent.
func ExampleCreateTable() {
	client := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1"}, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:8000") // DynamoDB Local, say
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := dynamo.CreateTable(ctx, client, "ratelimit")
	if err != nil {
		log.Print(err)
		return
	}
	fmt.Println("created:", st.Created, "TTL:", st.TTL)
}

// Keys are stored as raw bytes, so IDs need no escaping. A key prefix sits
// between NUL bytes, so no prefix and limiter name can run into each other.
func ExampleStore_EncodeKey() {
	st, _ := dynamo.New(&dynamodb.Client{}, dynamo.WithKeyPrefix("shop/"))
	pk, _ := st.EncodeKey(store.Key{Namespace: "api:gcra", ID: "user {42}"})
	fmt.Printf("%q\n", pk)
	plain, _ := dynamo.New(&dynamodb.Client{})
	pk, _ = plain.EncodeKey(store.Key{Namespace: "api:gcra", ID: "user {42}"})
	fmt.Printf("%q\n", pk)
	// Output:
	// "\x00shop/\x00api:gcra:user {42}"
	// "api:gcra:user {42}"
}
