"""The windows the main window opens from Tools, each made on first use: the model manager, the settings dialog,
the compare window and the fastest-setting sweep (each shown within the screen: screen_fit.show_window); and what
their choices do to the chat.

The Models window's target and draft wait in the chat session (`expect_pair`) until that target has loaded.
May touch: those windows' public methods and signals, the window's views and public methods.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.core.config import SpecConfig
from engine.core.methods import implied_method, method_spec, plain_method
from gui.views.main.screen_fit import show_window


class ToolWindows:
    def __init__(self, window) -> None:
        self.window = window
        self.model_manager = self.settings_dialog = self.compare_window = self.fastest_dialog = None

    # ------------------------------------------------------------------ models
    def open_models(self):
        """The model manager (model facts, target/draft pairing, downloads)."""
        window = self.window
        if self.model_manager is None:
            from gui.views.dialogs.models import ModelManager

            self.model_manager = manager = ModelManager(
                window.settings, window.palette_, target=window.session.model_name(window.controls.model_name()),
                draft=window.controls.draft_name(), parent=window)
            manager.setWindowFlag(Qt.WindowType.Window, True)
            manager.set_backend(window.controls.backend_name())
            manager.load_requested.connect(self.load_from_manager)
            manager.download_finished.connect(lambda _result: window.drafts.installed_changed())
            manager.train_requested.connect(window.training.open)
        show_window(self.model_manager)
        return self.model_manager

    def backend_changed(self, backend: str) -> None:
        """The settings panel's backend changed: the Models window shows it too."""
        if self.model_manager is not None:
            self.model_manager.set_backend(backend)

    def load_from_manager(self, target: str, draft, device: str, dtype: str) -> None:
        window = self.window
        options = window.load_options()
        # the Models window loads on its Backend choice
        backend = self.model_manager.backend_name() if self.model_manager is not None else options.backend
        changed_device = (options.device, options.dtype, options.backend) != (device, dtype, backend)
        window.controls.set_backend(backend)
        window.set_device(device, dtype)
        # applied once the target has loaded (apply_pending_pair)
        if window.session.expect_pair(target, draft) and not changed_device:
            self.apply_pending_pair(target)  # already loaded: nothing to wait for
            return
        window.load_model(target, force=changed_device)

    def apply_pending_pair(self, loaded: str) -> None:
        """The Models window's target and draft become the chat's settings only once that target loaded."""
        pending = self.window.session.take_pair(loaded)
        if pending is None:
            return
        target, draft = pending
        controls = self.window.controls
        if draft:
            controls.apply(method=implied_method(), draft=draft)
        elif method_spec(controls.method_name()).needs_draft:
            controls.apply(method=plain_method().name)
        controls.apply(model=target)

    def download_suggested(self, repo_id: str) -> None:
        """The settings panel's "Download …" button: the Models window downloads it."""
        manager = self.open_models()
        manager.repo.setText(repo_id)
        manager.start_download()

    # ------------------------------------------------------------------ settings
    def open_settings(self):
        from gui.persistence.settings import app_settings
        from gui.views.dialogs.settings import SettingsDialog

        window = self.window
        if self.settings_dialog is None:
            self.settings_dialog = SettingsDialog(
                history_path=str(window.store.path) if window.store is not None else "",
                settings_path=window.settings.qsettings.fileName() or app_settings().fileName(), parent=window)
            self.settings_dialog.token_saved.connect(lambda _storage: self._token_changed())
            self.settings_dialog.token_removed.connect(self._token_changed)
        self.settings_dialog.refresh()
        show_window(self.settings_dialog)
        return self.settings_dialog

    def _token_changed(self) -> None:
        if self.model_manager is not None:
            self.model_manager.update_token_note()

    # ------------------------------------------------------------------ compare, fastest
    def open_compare(self):
        """Show the compare window (settings side by side, k sweep); it runs on this window's worker."""
        window = self.window
        if self.compare_window is None:
            from gui.views.compare.window import CompareWindow

            self.compare_window = CompareWindow(
                window.worker_thread, window.palette_,
                model_name=lambda: window.session.model_name(window.controls.model_name()),
                chat_busy=lambda: window.session.busy_reason() or self._fastest_busy(),
                apply_to_chat=self.apply_compared_spec, parent=window)
            self.compare_window.running_changed.connect(lambda _running: window.update_actions())
        show_window(self.compare_window)
        return self.compare_window

    def comparing(self) -> bool:
        """A comparison or the fastest-setting sweep holds the device."""
        return ((self.compare_window is not None and self.compare_window.running)
                or (self.fastest_dialog is not None and self.fastest_dialog.running))

    def _fastest_busy(self) -> str | None:
        running = self.fastest_dialog is not None and self.fastest_dialog.running
        return "The fastest-setting sweep is running: wait for it or stop it first." if running else None

    def _compare_busy(self) -> str | None:
        running = self.compare_window is not None and self.compare_window.running
        return "A comparison is running: stop it first." if running else None

    def open_fastest(self):
        """"Which setting is fastest here?": a short sweep with repeats on the chat's last prompt."""
        window = self.window
        if self.fastest_dialog is None:
            from gui.views.dialogs.fastest import FastestDialog

            self.fastest_dialog = dialog = FastestDialog(
                window.worker_thread, window.palette_, prompt=window.session.last_prompt,
                model_name=lambda: window.session.model_name(window.controls.model_name()),
                sampling=lambda: window.controls.read().sampling, draft=window.controls.usable_draft,
                busy=lambda: window.session.busy_reason() or self._compare_busy(),
                apply_to_chat=self.apply_compared_spec, parent=window)
            dialog.setWindowFlag(Qt.WindowType.Window, True)
            dialog.running_changed.connect(lambda _running: window.update_actions())
        show_window(self.fastest_dialog)
        return self.fastest_dialog

    def apply_compared_spec(self, spec: SpecConfig) -> None:
        self.window.controls.apply_spec(spec)
        self.window.set_status(f"Settings applied: {spec.label()}")

    # ------------------------------------------------------------------ theme, shutdown
    def set_palette(self, palette) -> None:
        for view in (self.model_manager, self.compare_window, self.fastest_dialog):
            if view is not None:
                view.set_palette(palette)

    def shutdown(self) -> None:
        """Close the compare window and the sweep (each stops its run) and join the model manager's threads."""
        if self.compare_window is not None:
            self.compare_window.close()
        if self.fastest_dialog is not None:
            self.fastest_dialog.close()
        if self.model_manager is not None:
            self.model_manager.shutdown()
