package pluginrpc

import (
	"context"
	"fmt"

	pb "github.com/kernelhost/kernelhost/plugins/transportplugin/proto"
)

// Gauge is one gauge sample a transport reports about itself (a warm
// pool's interpreters and their memory, say); the host serves it in
// /metrics. Samples of one Name share Help and label names.
type Gauge struct {
	Name   string
	Help   string
	Labels map[string]string
	Value  float64
}

// GaugeReporter is what a transport implements to have gauges of its own in
// the host's /metrics. The plugin asks at each scrape; it must answer
// quickly.
type GaugeReporter interface {
	Gauges() []Gauge
}

// Stats implements the protocol's Stats call: the transport's gauges, if it
// reports any.
func (s *server) Stats(context.Context, *pb.StatsRequest) (*pb.StatsResponse, error) {
	t, err := s.transport()
	if err != nil {
		return nil, err
	}
	r, ok := t.(GaugeReporter)
	if !ok {
		return &pb.StatsResponse{}, nil
	}
	gauges := r.Gauges()
	out := &pb.StatsResponse{Gauges: make([]*pb.Gauge, len(gauges))}
	for i, g := range gauges {
		out.Gauges[i] = &pb.Gauge{Name: g.Name, Help: g.Help, Labels: g.Labels, Value: g.Value}
	}
	return out, nil
}

// Gauges asks the running plugin for its transport's gauges (see
// GaugeReporter); none while the plugin restarts.
func (s *Supervised) Gauges(ctx context.Context) ([]Gauge, error) {
	s.mu.Lock()
	inst := s.inst
	s.mu.Unlock()
	if inst == nil || inst.proc.gone() {
		return nil, nil
	}
	resp, err := inst.rpc.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return nil, fmt.Errorf("transport plugin %s: stats: %w", s.cfg.Name, err)
	}
	gauges := make([]Gauge, len(resp.Gauges))
	for i, g := range resp.Gauges {
		gauges[i] = Gauge{Name: g.Name, Help: g.Help, Labels: g.Labels, Value: g.Value}
	}
	return gauges, nil
}
