package cluster

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// NewMSKIAMWith is NewMSKIAM with the credentials and clock given.
func NewMSKIAMWith(creds aws.CredentialsProvider, region string, now func() time.Time) MSKIAM {
	return MSKIAM{creds: creds, region: region, now: now}
}
