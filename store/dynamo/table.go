package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TableClient is the part of a *dynamodb.Client that CreateTable uses.
type TableClient interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// TTL states reported in TableStatus.TTL.
const (
	// TTLEnabled: DynamoDB deletes items some time after AttrTTL passes.
	TTLEnabled = "ENABLED"
	// TTLEnabling: DynamoDB is turning TTL on (it takes up to an hour).
	TTLEnabling = "ENABLING"
	// TTLUnsupported: the endpoint has no UpdateTimeToLive (dynalite).
	// The store works the same, since it never relies on TTL for
	// correctness, but expired items stay until something deletes them.
	TTLUnsupported = "UNSUPPORTED"
)

// TableStatus is what CreateTable found and did.
type TableStatus struct {
	// Created reports that the table did not exist and CreateTable made it.
	Created bool
	// TTL is TTLEnabled, TTLEnabling or TTLUnsupported.
	TTL string
}

// CreateTable makes sure the table named table exists with the store's
// layout and has TTL enabled on AttrTTL. It is idempotent: on a table that
// exists it checks the key schema and enables TTL if it is off. A new table
// uses on-demand (PAY_PER_REQUEST) billing. CreateTable returns once the
// table is ACTIVE, whoever created it: a table that another process
// (another CreateTable, racing this one) is creating is waited for too,
// by DescribeTable every 50ms at first, up to every 2s, until it is ACTIVE
// or ctx ends; so a write right after CreateTable returns finds the
// table. A table being deleted is an error.
//
// The layout is one partition key, AttrKey of type B, and no sort key;
// the other attributes need no declaration. Where the endpoint lacks the
// TTL API (dynalite), CreateTable reports TTLUnsupported and no error.
// A table whose TTL is enabled on another attribute is an error: DynamoDB
// allows one TTL attribute per table, and the store's items would never be
// reclaimed.
func CreateTable(ctx context.Context, client TableClient, table string) (TableStatus, error) {
	var st TableStatus
	if client == nil {
		return st, fmt.Errorf("%w: dynamo: nil client", algorithms.ErrInvalidParams)
	}
	desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		_, err = client.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            &table,
			BillingMode:          types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrKey), AttributeType: types.ScalarAttributeTypeB}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrKey), KeyType: types.KeyTypeHash}},
		})
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return st, fmt.Errorf("dynamo: create table %s: %w", table, err)
		}
		st.Created = err == nil
		if desc, err = waitActive(ctx, client, table); err != nil {
			return st, err
		}
	case err != nil:
		return st, fmt.Errorf("dynamo: describe table %s: %w", table, err)
	case desc.Table == nil:
		return st, fmt.Errorf("dynamo: table %s: no description", table)
	case desc.Table.TableStatus == types.TableStatusCreating:
		// Another process is creating it: its items cannot be read or
		// written until it is ACTIVE.
		if desc, err = waitActive(ctx, client, table); err != nil {
			return st, err
		}
	case desc.Table.TableStatus == types.TableStatusDeleting:
		return st, fmt.Errorf("dynamo: table %s is being deleted: run CreateTable again once it is gone", table)
	}
	if err := checkSchema(table, desc.Table); err != nil {
		return st, err
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &table})
	if err != nil && !unsupported(err) {
		return st, fmt.Errorf("dynamo: describe TTL of table %s: %w", table, err)
	}
	if err == nil && ttl.TimeToLiveDescription != nil {
		d := ttl.TimeToLiveDescription
		attr := aws.ToString(d.AttributeName)
		switch d.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if attr != AttrTTL {
				return st, fmt.Errorf("dynamo: table %s has TTL on attribute %q, want %q", table, attr, AttrTTL)
			}
			st.TTL = string(d.TimeToLiveStatus)
			return st, nil
		case types.TimeToLiveStatusDisabling:
			return st, fmt.Errorf("dynamo: table %s is disabling TTL (on %q); enable it on %q once that is done", table, attr, AttrTTL)
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(AttrTTL), Enabled: aws.Bool(true)},
	})
	switch {
	case err == nil:
		st.TTL = TTLEnabling
	case unsupported(err):
		st.TTL = TTLUnsupported
	default:
		return st, fmt.Errorf("dynamo: enable TTL on %q of table %s: %w", AttrTTL, table, err)
	}
	return st, nil
}

// unsupported reports an endpoint that does not know the operation.
func unsupported(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "UnknownOperationException", "UnknownOperation", "NotImplemented", "InvalidAction":
			return true
		}
	}
	return false
}

// waitActive polls the table until it is ACTIVE.
func waitActive(ctx context.Context, client TableClient, table string) (*dynamodb.DescribeTableOutput, error) {
	pause := 50 * time.Millisecond
	for {
		desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		var notFound *types.ResourceNotFoundException
		switch {
		case err == nil && desc.Table != nil && desc.Table.TableStatus == types.TableStatusActive:
			return desc, nil
		case err != nil && !errors.As(err, &notFound):
			return nil, fmt.Errorf("dynamo: describe table %s: %w", table, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dynamo: waiting for table %s to become active: %w", table, ctx.Err())
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// checkSchema reports a table whose key is not AttrKey of type B alone.
func checkSchema(table string, d *types.TableDescription) error {
	if d == nil {
		return fmt.Errorf("dynamo: table %s: no description", table)
	}
	ok := len(d.KeySchema) == 1 && aws.ToString(d.KeySchema[0].AttributeName) == AttrKey && d.KeySchema[0].KeyType == types.KeyTypeHash
	if ok {
		for _, a := range d.AttributeDefinitions {
			if aws.ToString(a.AttributeName) == AttrKey && a.AttributeType != types.ScalarAttributeTypeB {
				ok = false
			}
		}
	}
	if !ok {
		return fmt.Errorf("dynamo: table %s does not have the store's layout: want partition key %q of type B and no sort key", table, AttrKey)
	}
	return nil
}
