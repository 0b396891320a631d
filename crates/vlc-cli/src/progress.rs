//! Progress bars for long work (stderr; hidden when stderr is not a terminal or with --quiet).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vlc::BuildEvent;

/// A bar counting `total` items of work named `name` (drawn only where stderr is a terminal).
pub fn count_bar(name: &str, total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{prefix:>18} [{bar:30}] {pos}/{len} ({elapsed}, {eta} left)")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_prefix(name.to_string());
    bar
}

pub struct BuildProgress {
    bar: Option<ProgressBar>,
    enabled: bool,
}

impl BuildProgress {
    pub fn new(enabled: bool) -> Self {
        BuildProgress { bar: None, enabled }
    }

    pub fn handle(&mut self, event: &BuildEvent) {
        if !self.enabled {
            return;
        }
        match event {
            BuildEvent::Stage { name, total } => {
                if let Some(b) = self.bar.take() {
                    b.finish_and_clear();
                }
                let bar = ProgressBar::with_draw_target(
                    Some(*total as u64),
                    ProgressDrawTarget::stderr(),
                );
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>18} [{bar:30}] {pos}/{len} {msg} ({elapsed})",
                    )
                    .unwrap()
                    .progress_chars("=> "),
                );
                bar.set_prefix(name.to_string());
                self.bar = Some(bar);
            }
            BuildEvent::Advance { done } => {
                if let Some(b) = &self.bar {
                    b.set_position(*done as u64);
                }
            }
            BuildEvent::Iteration(s) => {
                if let Some(b) = &self.bar {
                    b.set_position(s.iteration as u64);
                    b.set_message(format!("energy {:.5} churn {:.3}", s.energy, s.churn));
                }
            }
        }
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
