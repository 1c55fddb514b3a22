package s3fs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/version"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// DefaultMaxAttempts is the attempts of each S3 request, the first included, unless
// --aws-max-attempts says otherwise.
const DefaultMaxAttempts = 4

// userAgentKey names the mounter in the User-Agent of its S3 requests, followed by its version.
const userAgentKey = "s3csi-mounter"

// newClient builds the S3 client of one mount.
//
// Problem: the SDK's default retryer gives up early under a burst of errors (its retry token
// bucket) and its default transport keeps two idle connections per host, which serializes the
// parallel ranged GETs that prefetch depends on.
// Solution: a standard retryer with jittered backoff (throttling and 5xx are retried) and no
// retry quota, a transport sized for the mount's concurrency, and a response-header timeout so a
// silent endpoint fails a request instead of hanging it.
func newClient(ctx context.Context, opts *mountargs.Options, creds aws.CredentialsProvider, cfg *Config) (*s3.Client, error) {
	var loadOpts []func(*config.LoadOptions) error
	if opts.Profile != "" {
		loadOpts = append(loadOpts, config.WithSharedConfigProfile(opts.Profile))
	}
	if opts.CABundle != "" {
		pem, err := os.ReadFile(opts.CABundle)
		if err != nil {
			return nil, fmt.Errorf("read --ca-bundle: %w", err)
		}
		loadOpts = append(loadOpts, config.WithCustomCABundle(bytes.NewReader(pem)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	region := opts.Region
	if region == "" {
		region = awsCfg.Region
	}
	if region == "" {
		region = "us-east-1"
	}
	conns := cfg.maxThreads() * 2
	// Start from the loaded client so that AWS_CA_BUNDLE and proxy settings are kept.
	base, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		base = awshttp.NewBuildableClient()
	}
	httpClient := base.
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = cfg.RequestTimeout }).
		WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns = conns
			t.MaxIdleConnsPerHost = conns
			t.ResponseHeaderTimeout = cfg.RequestTimeout
		})
	if len(cfg.CABundle) > 0 {
		// The driver's CA (the mount request's), trusted besides the system roots.
		pool, err := cabundle.Pool(cfg.CABundle)
		if err != nil {
			return nil, fmt.Errorf("trust the driver's CA bundle: %w", err)
		}
		httpClient = httpClient.WithTransportOptions(func(t *http.Transport) {
			if t.TLSClientConfig == nil {
				t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			t.TLSClientConfig.RootCAs = pool
		})
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.Region = region
		o.HTTPClient = httpClient
		o.UsePathStyle = opts.ForcePathStyle
		if opts.EndpointURL != "" {
			o.BaseEndpoint = aws.String(opts.EndpointURL)
		}
		switch {
		case opts.NoSignRequest:
			o.Credentials = aws.AnonymousCredentials{}
		case creds != nil:
			o.Credentials = aws.NewCredentialsCache(creds)
		}
		o.Retryer = retry.NewStandard(func(r *retry.StandardOptions) {
			r.MaxAttempts = DefaultMaxAttempts
			if opts.MaxAttempts != nil {
				r.MaxAttempts = *opts.MaxAttempts
			}
			r.MaxBackoff = 2 * time.Second
			r.RateLimiter = ratelimit.None
			// An untrusted certificate stays untrusted: fail at once with the reason.
			r.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
				if cabundle.Untrusted(err) {
					return aws.FalseTernary
				}
				return aws.UnknownTernary
			})}, r.Retryables...)
		})
		if opts.Debug {
			o.ClientLogMode = aws.LogRetries
			o.Logger = sdkLogger{log: cfg.Log}
		}
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		if opts.RequesterPays {
			o.APIOptions = append(o.APIOptions, smithyhttp.SetHeaderValue("x-amz-request-payer", "requester"))
		}
		if opts.ExpectedBucketOwner != "" {
			o.APIOptions = append(o.APIOptions, smithyhttp.SetHeaderValue("x-amz-expected-bucket-owner", opts.ExpectedBucketOwner))
		}
		if opts.UserAgentPrefix != "" {
			o.AppID = opts.UserAgentPrefix
		}
		// The endpoint's logs tell which driver version sent a request.
		o.APIOptions = append(o.APIOptions, awsmiddleware.AddUserAgentKeyValue(userAgentKey, version.Version),
			func(st *middleware.Stack) error { return st.Initialize.Add(logFailures(cfg.Log), middleware.Before) })
	}), nil
}

// sdkLogger hands the SDK's log lines (with --debug: each retried request, never a credential)
// to the mount's log.
type sdkLogger struct{ log logr.Logger }

// Logf implements logging.Logger.
func (l sdkLogger) Logf(_ logging.Classification, format string, v ...any) {
	l.log.Info("S3 client", "message", fmt.Sprintf(format, v...))
}

// logFailures logs every S3 request that failed after the SDK's retries, except the "not found"
// answers a lookup expects.
//
// Problem: a failed request reaches the application only as an errno (EIO, EACCES), and the
// operator reading the Mountpoint Pod's log could not tell which request failed, on which key,
// after how long, or why (a timeout, a refused connection, a server error).
// Solution: a middleware outside the retry loop that logs the operation, the key or prefix, the
// time the request and its retries took, and the SDK's error. The error text holds the request's
// URL and the server's answer, never a credential or a signature.
func logFailures(log logr.Logger) middleware.InitializeMiddleware {
	return middleware.InitializeMiddlewareFunc("s3csi-log-failures", func(
		ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler,
	) (middleware.InitializeOutput, middleware.Metadata, error) {
		start := time.Now()
		out, md, err := next.HandleInitialize(ctx, in)
		if err != nil && toErrno(err) != syscall.ENOENT && !errors.Is(err, context.Canceled) {
			log.Error(err, "S3 request failed", "operation", awsmiddleware.GetOperationName(ctx),
				"key", keyOf(in.Parameters), "elapsed", time.Since(start).Round(time.Millisecond).String())
		}
		return out, md, err
	})
}

// keyOf is the object key or listing prefix of the input of an S3 request the mounter sends, ""
// for other requests.
func keyOf(params any) string {
	switch p := params.(type) {
	case *s3.HeadObjectInput:
		return aws.ToString(p.Key)
	case *s3.GetObjectInput:
		return aws.ToString(p.Key)
	case *s3.PutObjectInput:
		return aws.ToString(p.Key)
	case *s3.DeleteObjectInput:
		return aws.ToString(p.Key)
	case *s3.CreateMultipartUploadInput:
		return aws.ToString(p.Key)
	case *s3.UploadPartInput:
		return aws.ToString(p.Key)
	case *s3.CompleteMultipartUploadInput:
		return aws.ToString(p.Key)
	case *s3.AbortMultipartUploadInput:
		return aws.ToString(p.Key)
	case *s3.ListObjectsV2Input:
		return aws.ToString(p.Prefix)
	}
	return ""
}
