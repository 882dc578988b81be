package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/sasl"
)

// credentialsRefresh is how long before they expire the AWS credentials
// are fetched again (IRSA's and Pod Identity's last an hour or more).
const credentialsRefresh = 5 * time.Minute

// mskService is the SigV4 service of MSK's IAM access control.
const mskService = "kafka-cluster"

// emptyPayload is the SHA-256 of nothing: the signed request has no body.
var emptyPayload = func() string { h := sha256.Sum256(nil); return hex.EncodeToString(h[:]) }()

// MSKIAM is the AWS_MSK_IAM SASL mechanism (Amazon MSK's IAM access
// control): a request to kafka-cluster:Connect on the broker's host,
// presigned with SigV4 by the AWS SDK for region, sent as MSK's JSON
// payload (version 2020_10_22), the format of franz-go's pkg/sasl/aws and
// of AWS's aws-msk-iam-auth. franz-go's signer takes the region from the
// broker's host name or the process environment only; this one signs for
// source.sasl.aws.region.
type MSKIAM struct {
	creds  aws.CredentialsProvider
	region string
	now    func() time.Time
}

var _ sasl.Mechanism = MSKIAM{}

// NewMSKIAM returns the mechanism for region with credentials from the
// AWS SDK's default chain (environment, web identity as IRSA sets it, EKS
// Pod Identity, ECS and EC2 roles), cached and fetched again
// credentialsRefresh before they expire. It reads the shared AWS config
// files, if any, and asks nothing of the network until a connection does.
func NewMSKIAM(region string) (MSKIAM, error) {
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(region),
		awsconfig.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
			o.ExpiryWindow, o.ExpiryWindowJitterFrac = credentialsRefresh, 0.5
		}))
	if err != nil {
		return MSKIAM{}, fmt.Errorf("source.sasl.mechanism AWS_MSK_IAM: AWS config: %w", err)
	}
	return MSKIAM{creds: cfg.Credentials, region: region, now: time.Now}, nil
}

// Name implements sasl.Mechanism.
func (MSKIAM) Name() string { return "AWS_MSK_IAM" }

// Authenticate implements sasl.Mechanism: host is the broker's host:port.
func (m MSKIAM) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	if m.creds == nil {
		return nil, nil, fmt.Errorf("%w: no AWS credential provider", ErrCredentialsUnavailable)
	}
	creds, err := m.creds.Retrieve(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: AWS credentials (environment, web identity, Pod Identity, ECS or EC2 role): %w", ErrCredentialsUnavailable, err)
	}
	payload, err := mskPayload(ctx, creds, host, m.region, m.now())
	if err != nil {
		return nil, nil, err
	}
	return mskSession{}, payload, nil
}

// mskPayload is the signed connect request as MSK reads it: the presigned
// URL's query parameters, lower-cased, with the host, version and user
// agent.
func mskPayload(ctx context.Context, creds aws.Credentials, hostport, region string, at time.Time) ([]byte, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	q := url.Values{"Action": {mskService + ":Connect"}, "X-Amz-Expires": {"900"}} // 15 minutes, as AWS's clients
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/?"+q.Encode(), http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("AWS_MSK_IAM: broker host %q: %w", host, err)
	}
	signed, _, err := v4.NewSigner().PresignHTTP(ctx, creds, req, emptyPayload, mskService, region, at.UTC())
	if err != nil {
		return nil, fmt.Errorf("AWS_MSK_IAM: sign: %w", err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		return nil, fmt.Errorf("AWS_MSK_IAM: signed URL: %w", err)
	}
	fields := map[string]string{"version": "2020_10_22", "host": host, "user-agent": ClientID}
	for k, vs := range u.Query() {
		fields[strings.ToLower(k)] = vs[0]
	}
	return json.Marshal(fields)
}

// mskSession reads the broker's one answer: a JSON document on success.
type mskSession struct{}

func (mskSession) Challenge(resp []byte) (bool, []byte, error) {
	if len(resp) == 0 {
		return false, nil, errors.New("AWS_MSK_IAM: the broker answered nothing")
	}
	return true, nil, nil
}
