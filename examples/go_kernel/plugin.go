// The part of a Go kernel that talks to model-provider plugins through hashicorp/go-plugin:
// copy this file into your kernel (see README.md next to it).
//
// A plugin is any program that serves model.v1.ModelService and speaks go-plugin's handshake,
// such as `protocol-py serve --handshake` (docs/handshake.md of protocol-py). The kernel
// starts it with the handshake config below, and calls the service on the *grpc.ClientConn
// go-plugin dialled; the messages are the protoc-gen-go types of the protocol's proto/ tree.
// protoc-gen-go makes no service stubs, so the RPCs are invoked by their method paths.
package main

import (
	"context"
	"errors"
	"io"
	"os/exec"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	modelv1 "protocolpy.example/gen/model/v1"
)

// Handshake is the handshake config every kernel and model-provider plugin share: protocol
// major 1 and the model protocol's magic cookie. A plugin refuses to start (exit status 1)
// without the cookie.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MODEL_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "model.v1.ModelService",
}

// PluginName is the key under which the model plugin is dispensed.
const PluginName = "model"

// ServicePrefix is the path prefix of ModelService's methods.
const ServicePrefix = "/model.v1.ModelService/"

// ModelPlugin is the kernel's side of the plugin: it only dials (GRPCServer is for Go
// plugins, which this kernel does not implement).
type ModelPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

// GRPCServer is not used by a kernel.
func (ModelPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("model plugins are served by the plugin process, not by the kernel")
}

// GRPCClient wraps the connection go-plugin dialled (plaintext, or AutoMTLS).
func (ModelPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return &Model{Conn: conn}, nil
}

// NewModelClient prepares a go-plugin client for a plugin command; call Client() on it to
// start the plugin and Kill() to stop it. autoMTLS gives the plugin a fresh client
// certificate: the connection then trusts only the plugin's certificate and the plugin
// only the kernel's.
func NewModelClient(cmd *exec.Cmd, autoMTLS bool, logger hclog.Logger) *plugin.Client {
	return plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          map[string]plugin.Plugin{PluginName: &ModelPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         autoMTLS,
		Logger:           logger,
	})
}

// Model calls ModelService on a connected plugin.
type Model struct {
	Conn *grpc.ClientConn
}

// GetCapabilities returns the plugin's models, config schema and protocol version.
func (m *Model) GetCapabilities(ctx context.Context) (*modelv1.Capabilities, error) {
	reply := &modelv1.GetCapabilitiesResponse{}
	err := m.Conn.Invoke(ctx, ServicePrefix+"GetCapabilities", &modelv1.GetCapabilitiesRequest{}, reply)
	return reply.GetCapabilities(), err
}

// Configure sets the plugin's configuration (checked against its config schema: a bad one is
// refused with INVALID_ARGUMENT and the previous one stays).
func (m *Model) Configure(ctx context.Context, request *modelv1.ConfigureRequest) error {
	return m.Conn.Invoke(ctx, ServicePrefix+"Configure", request, &modelv1.ConfigureResponse{})
}

// StreamCompletion runs one turn, calling onEvent for every StreamEvent until the stream
// ends (after its Stop or in-band error event). Cancelling ctx cancels the turn.
func (m *Model) StreamCompletion(ctx context.Context, request *modelv1.StreamCompletionRequest, onEvent func(*modelv1.StreamEvent)) error {
	stream, err := m.Conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, ServicePrefix+"StreamCompletion")
	if err != nil {
		return err
	}
	if err := stream.SendMsg(request); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		event := &modelv1.StreamEvent{}
		if err := stream.RecvMsg(event); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		onEvent(event)
	}
}
