// Command go_kernel is a minimal model kernel built on hashicorp/go-plugin. It launches a
// model-provider plugin exactly as a Terraform-style kernel launches a provider, exercises it
// and stops it, then prints a JSON report (protocol-py's tools/interop checks every field):
//
//	go_kernel [-auto-mtls=true] [-model ID] [-orphan] [-v] -- protocol-py serve --handshake
//
// Steps: start the plugin (go-plugin's handshake; AutoMTLS unless -auto-mtls=false), Ping
// (the health service "plugin"), GetCapabilities, Configure (a valid config, then one the
// plugin must refuse with INVALID_ARGUMENT), one StreamCompletion, a method and a service the
// plugin does not have (both must be UNIMPLEMENTED), and Kill (go-plugin's graceful stop:
// plugin.GRPCController/Shutdown, then it waits up to 2 s for the process to exit before
// SIGKILL). The report gives the Kill time, the plugin's exit status and the entries the
// run left in TMPDIR (those there after the stop that were not there before the start). With -orphan it stops after Ping and exits
// without Kill, as a crashed kernel would: the plugin must notice and exit by itself.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	commonv1 "protocolpy.example/gen/common/v1"
	contentv1 "protocolpy.example/gen/content/v1"
	modelv1 "protocolpy.example/gen/model/v1"
)

// callTimeout bounds every RPC.
const callTimeout = 30 * time.Second

// Report is what the run found (printed as JSON on stdout).
type Report struct {
	Network           string   `json:"network"`
	AutoMTLS          bool     `json:"auto_mtls"`
	NegotiatedVersion int      `json:"negotiated_version"`
	PluginPID         int      `json:"plugin_pid"`
	Ping              string   `json:"ping"`
	ProtocolVersion   string   `json:"protocol_version"`
	Models            []string `json:"models"`
	Configure         string   `json:"configure"`
	ConfigureRefused  string   `json:"configure_refused"`
	Events            int      `json:"events"`
	EventKinds        []string `json:"event_kinds"`
	StopReason        string   `json:"stop_reason"`
	TextChars         int      `json:"text_chars"`
	UnknownMethod     string   `json:"unknown_method"`
	UnknownService    string   `json:"unknown_service"`
	KillSeconds       float64  `json:"kill_seconds"`
	Exited            bool     `json:"exited"`
	ExitCode          int      `json:"exit_code"`
	TmpdirLeftBehind  []string `json:"tmpdir_left_behind"`
	Errors            []string `json:"errors"`
}

func (r *Report) fail(what string, err error) {
	r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", what, err))
}

func codeOf(err error) string {
	return status.Code(err).String()
}

func tmpdirEntries() []string {
	entries, err := ioutil.ReadDir(os.TempDir())
	names := []string{}
	if err != nil {
		return append(names, "error: "+err.Error())
	}
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	sort.Strings(names)
	return names
}

// newEntries is what after holds that before does not, in after's order.
func newEntries(before, after []string) []string {
	seen := make(map[string]bool, len(before))
	for _, name := range before {
		seen[name] = true
	}
	added := []string{}
	for _, name := range after {
		if !seen[name] {
			added = append(added, name)
		}
	}
	return added
}

func request(model string) *modelv1.StreamCompletionRequest {
	return &modelv1.StreamCompletionRequest{
		ModelId:     model,
		CallContext: &commonv1.CallContext{SessionId: "go-kernel-session", TurnId: "go-kernel-turn-1"},
		Messages: []*contentv1.Message{{
			Role: contentv1.Role_ROLE_USER,
			Id:   "01JD7Q3V5W6X7Y8Z9A0B1C2D3F",
			Content: []*contentv1.ContentBlock{{
				Block: &contentv1.ContentBlock_Text{Text: &contentv1.TextBlock{Text: "Please use tool get_weather for Paris."}},
			}},
		}},
		Tools: []*modelv1.ToolDeclaration{{
			Name:        "get_weather",
			Description: "Current weather for a city.",
			InputSchema: mustStruct(map[string]interface{}{
				"type":       "object",
				"properties": map[string]interface{}{"city": map[string]interface{}{"type": "string"}},
				"required":   []interface{}{"city"},
			}),
		}},
	}
}

func mustStruct(value map[string]interface{}) *structpb.Struct {
	result, err := structpb.NewStruct(value)
	if err != nil {
		panic(err)
	}
	return result
}

// exercise runs the RPCs on a started plugin.
func exercise(model *Model, wanted string, report *Report) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	caps, err := model.GetCapabilities(ctx)
	if err != nil {
		report.fail("GetCapabilities", err)
		return
	}
	report.ProtocolVersion = caps.GetProtocolVersion()
	for _, spec := range caps.GetModels() {
		report.Models = append(report.Models, spec.GetId())
	}
	if wanted == "" && len(report.Models) > 0 {
		wanted = report.Models[0]
	}

	good := &modelv1.ConfigureRequest{Config: mustStruct(map[string]interface{}{"max_tokens": 256})}
	report.Configure = codeOf(model.Configure(ctx, good))
	bad := &modelv1.ConfigureRequest{Config: mustStruct(map[string]interface{}{"max_tokens": 0})}
	report.ConfigureRefused = codeOf(model.Configure(ctx, bad))

	seen := map[string]bool{}
	err = model.StreamCompletion(ctx, request(wanted), func(event *modelv1.StreamEvent) {
		report.Events++
		message := event.ProtoReflect()
		if field := message.WhichOneof(message.Descriptor().Oneofs().ByName("event")); field != nil {
			kind := string(field.Name())
			if !seen[kind] {
				seen[kind] = true
				report.EventKinds = append(report.EventKinds, kind)
			}
		}
		report.TextChars += len(event.GetTextDelta().GetText())
		if stop := event.GetStop(); stop != nil {
			report.StopReason = stop.GetReason().String()
		}
	})
	if err != nil {
		report.fail("StreamCompletion", err)
	}

	probe := &modelv1.GetCapabilitiesRequest{}
	err = model.Conn.Invoke(ctx, ServicePrefix+"NoSuchMethod", probe, &modelv1.GetCapabilitiesResponse{})
	report.UnknownMethod = codeOf(err)
	err = model.Conn.Invoke(ctx, "/model.v1.NoSuchService/Call", probe, &modelv1.GetCapabilitiesResponse{})
	report.UnknownService = codeOf(err)
	if status.Code(err) != codes.Unimplemented {
		report.fail("unknown service", err)
	}
}

func main() {
	autoMTLS := flag.Bool("auto-mtls", true, "give the plugin a client certificate (go-plugin's AutoMTLS)")
	wanted := flag.String("model", "", "model id for StreamCompletion (default: the first one)")
	orphan := flag.Bool("orphan", false, "stop after Ping and exit without Kill")
	verbose := flag.Bool("v", false, "log go-plugin's and the plugin's messages to stderr")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: go_kernel [flags] -- PLUGIN-COMMAND [ARGS...]")
		os.Exit(2)
	}
	level := hclog.Warn
	if *verbose {
		level = hclog.Debug
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "go_kernel", Level: level, Output: os.Stderr})

	before := tmpdirEntries()
	report := &Report{AutoMTLS: *autoMTLS, ExitCode: -1}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	client := NewModelClient(cmd, *autoMTLS, logger)
	rpc, err := client.Client()
	if err != nil {
		report.fail("start", err)
		client.Kill()
	} else {
		report.NegotiatedVersion = client.NegotiatedVersion()
		if attach := client.ReattachConfig(); attach != nil {
			report.PluginPID = attach.Pid
			report.Network = attach.Addr.Network()
		}
		report.Ping = "ok"
		if err := rpc.Ping(); err != nil {
			report.Ping = codeOf(err)
		}
		if *orphan {
			emit(report)
			os.Exit(0) // no Kill: the plugin must notice that its kernel is gone
		}
		raw, err := rpc.Dispense(PluginName)
		if err != nil {
			report.fail("dispense", err)
		} else {
			exercise(raw.(*Model), *wanted, report)
		}
		started := time.Now()
		client.Kill()
		report.KillSeconds = time.Since(started).Seconds()
	}
	report.Exited = client.Exited()
	if cmd.ProcessState != nil {
		report.ExitCode = cmd.ProcessState.ExitCode()
	}
	report.TmpdirLeftBehind = newEntries(before, tmpdirEntries())
	emit(report)
	if len(report.Errors) > 0 {
		os.Exit(1)
	}
}

func emit(report *Report) {
	out, err := json.Marshal(report)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}
